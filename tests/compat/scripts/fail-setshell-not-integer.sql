\setshell x echo foo
