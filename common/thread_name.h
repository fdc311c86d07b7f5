// Names the threads of the stallscope process, so the sampler (which reads
// /proc/PID/task/TID/comm) and explain can tell the driver's own CPU from the
// writer's and the samplers'.
#pragma once

namespace stallscope {

// Thread names (comm, at most 15 bytes). Driver threads are "ss-driver/N".
inline constexpr const char* kDriverThreadPrefix = "ss-driver/";
inline constexpr const char* kWriterThreadName = "ss-writer";
inline constexpr const char* kHostSamplerThreadName = "ss-sampler";
inline constexpr const char* kAshSamplerThreadName = "ss-ash";
inline constexpr const char* kPoolerSamplerThreadName = "ss-pooler";  // --pooler-admin
inline constexpr const char* kProgressThreadName = "ss-progress";
inline constexpr const char* kClockThreadName = "ss-clock";         // run: clock-offset estimates
inline constexpr const char* kOutputWatchThreadName = "ss-output";  // tools/session.h

// Names the calling thread (pthread_setname_np; longer names are cut to 15
// bytes). Failure is ignored: a name is a label, not a requirement.
void set_thread_name(const char* name) noexcept;

}  // namespace stallscope
