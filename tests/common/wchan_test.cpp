#include "common/wchan.h"

#include <gtest/gtest.h>

namespace stallscope::common {
namespace {

TEST(Wchan, FamiliesMatchByFamilyNotOneName) {
  EXPECT_EQ(wchan_family("folio_wait_bit_common"), WchanFamily::storage);
  EXPECT_EQ(wchan_family("wait_on_page_bit_common"), WchanFamily::storage);
  EXPECT_EQ(wchan_family("jbd2_log_wait_commit"), WchanFamily::storage);
  EXPECT_EQ(wchan_family("balance_dirty_pages"), WchanFamily::storage);
  EXPECT_EQ(wchan_family("mem_cgroup_handle_over_high"), WchanFamily::memory);
  // Memory before storage: a swap read waits on a page too.
  EXPECT_EQ(wchan_family("swap_read_folio"), WchanFamily::memory);
  EXPECT_EQ(wchan_family("do_epoll_wait"), WchanFamily::latch);
  EXPECT_EQ(wchan_family("ep_poll"), WchanFamily::latch);
  EXPECT_EQ(wchan_family("poll_schedule_timeout.constprop.0"), WchanFamily::latch);
  EXPECT_EQ(wchan_family("futex_wait_queue_me"), WchanFamily::futex);
  // Linux 6.x: holds "do_wait", which is a wait for a child.
  EXPECT_EQ(wchan_family("futex_do_wait"), WchanFamily::futex);
  EXPECT_EQ(wchan_family("do_wait"), WchanFamily::child);
  EXPECT_EQ(wchan_family("hrtimer_nanosleep"), WchanFamily::timer);
  EXPECT_EQ(wchan_family("anon_pipe_read"), WchanFamily::input);
  EXPECT_EQ(wchan_family("eventfd_read"), WchanFamily::input);
  EXPECT_EQ(wchan_family("anon_pipe_write"), WchanFamily::other);
  EXPECT_EQ(wchan_family("pipe_write"), WchanFamily::other);
  EXPECT_EQ(wchan_family("sk_stream_wait_memory"), WchanFamily::other);
  EXPECT_EQ(wchan_family("0"), WchanFamily::none);
  EXPECT_EQ(wchan_family(""), WchanFamily::none);
}

// The sampler's test: a task asleep on an idle channel waits for work; on
// any other it is held up, and gets a row every tick.
TEST(Wchan, IdleIsAWaitForWorkNotASleepHeldInTheKernel) {
  for (const char* w :
       {"", "do_epoll_wait", "ep_poll", "poll_schedule_timeout", "anon_pipe_read", "pipe_read",
        "futex_do_wait", "do_wait", "hrtimer_nanosleep", "wait_woken", "kvm_vcpu_block"}) {
    EXPECT_TRUE(is_idle_wchan(w)) << w;
  }
  for (const char* w :
       {"anon_pipe_write", "pipe_write", "sk_stream_wait_memory", "sock_alloc_send_pskb",
        "unix_wait_for_peer", "folio_wait_bit_common", "mem_cgroup_handle_over_high"}) {
    EXPECT_FALSE(is_idle_wchan(w)) << w;
  }
}

TEST(Wchan, MeaningSaysWhatHoldsTheSleepAndWhoseLogABackendsPipeIs) {
  EXPECT_EQ(wchan_meaning("anon_pipe_write", false), "a full pipe: its reader does not keep up");
  EXPECT_NE(wchan_meaning("anon_pipe_write", true).find("log output"), std::string_view::npos);
  EXPECT_NE(wchan_meaning("sock_alloc_send_pskb", true).find("syslog"), std::string_view::npos);
  EXPECT_EQ(wchan_meaning("sk_stream_wait_memory", false),
            "a full TCP send buffer: the peer does not read");
  EXPECT_EQ(wchan_meaning("some_new_wait", true), "");
}

}  // namespace
}  // namespace stallscope::common
