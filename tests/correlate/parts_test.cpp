#include "correlate/parts.h"

#include <gtest/gtest.h>

namespace stallscope::correlate {
namespace {

TEST(Parts, IdsAreTheFamilyAndItsKey) {
  EXPECT_EQ(part_id(Part::server_cpu), "server_cpu");
  EXPECT_EQ(part_id(Part::server_wait, "Lock"), "server_wait:Lock");
  EXPECT_EQ(part_id(Part::kernel_wait, "anon_pipe_write"), "kernel_wait:anon_pipe_write");
  // Not keyed: a key is not part of the id.
  EXPECT_EQ(part_id(Part::remainder, "x"), "remainder");
}

TEST(Parts, AnIdTellsItsFamilyAndAnUnknownOneNone) {
  EXPECT_EQ(part_of("server_wait:Lock"), Part::server_wait);
  EXPECT_EQ(part_of("path_cpu:pgbouncer"), Part::path_cpu);
  EXPECT_EQ(part_of("schedule_lag"), Part::schedule_lag);
  // A keyed key may hold a colon of its own.
  EXPECT_EQ(part_of("process_cpu:a:b (pid 1)"), Part::process_cpu);
  EXPECT_EQ(part_of("server_wait"), std::nullopt);  // keyed family without its key
  EXPECT_EQ(part_of("remainder:x"), std::nullopt);
  EXPECT_EQ(part_of("something_new"), std::nullopt);
}

TEST(Parts, LabelsInWords) {
  EXPECT_EQ(part_label("server_cpu"), "server backend CPU");
  EXPECT_EQ(part_label("kernel_wait:pipe_write"), "backend asleep in pipe_write");
  EXPECT_EQ(part_label("client_blocked:tty_write"), "client blocked in tty_write");
  EXPECT_EQ(part_label("remainder"), "remainder (round trips)");
  EXPECT_EQ(part_label("steal"), "steal");                  // the host's: as named
  EXPECT_EQ(part_label("something_new"), "something_new");  // unknown: as it is
}

}  // namespace
}  // namespace stallscope::correlate
