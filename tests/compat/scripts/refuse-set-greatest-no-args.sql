\set a greatest()
