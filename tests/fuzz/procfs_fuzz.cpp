// libFuzzer target: every parser of /proc (and cgroup) text the sampler
// reads by hand (sampler/procfs.h, sampler/tcp_counters.h; /proc/net/tcp for
// sockets.cpp), each on the
// whole input: the functions the sampler itself calls on what it reads.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "sampler/procfs.h"
#include "sampler/tcp_counters.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stallscope::sampler::detail;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (const auto s = parse_schedstat(text)) {
    FUZZ_CHECK(s->on_cpu_ns >= 0 && s->run_delay_ns >= 0 && s->timeslices >= 0);
  }
  if (const auto c = parse_status_context_switches(text)) {
    FUZZ_CHECK(c->voluntary >= 0 && c->nonvoluntary >= 0);
  }
  if (const auto w = parse_wchan(text)) is_idle_wchan(*w);
  is_idle_wchan(text);
  for (const auto& arg : split_cmdline(text)) FUZZ_CHECK(arg.size() <= text.size());
  parse_pressure(text);
  if (const auto io = parse_io(text)) FUZZ_CHECK(io->read_bytes >= 0 && io->write_bytes >= 0);
  parse_cgroup(text);
  parse_cpu_stat(text);
  if (const auto t = parse_task_stat(text)) FUZZ_CHECK(t->comm.size() <= text.size());
  if (const auto p = parse_pid_stat(text)) FUZZ_CHECK(p->comm.size() <= text.size());
  if (const auto k = parse_kernel_stack(text)) FUZZ_CHECK(!k->empty());
  if (const auto pid = parse_loadavg_last_pid(text)) FUZZ_CHECK(*pid >= 0);
  parse_net_counters(text);
  for (const auto& s : parse_tcp_sockets(text)) {
    FUZZ_CHECK(s.inode > 0 && s.local_port >= 0 && s.remote_port >= 0 && s.queued_bytes >= 0);
  }
  return 0;
}
