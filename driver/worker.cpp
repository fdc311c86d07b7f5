// Worker's loop (driver/worker.h): wait on the epoll instance and the
// timers, hand each ready client to its handler, and at the end of the run
// wind the clients down.
#include "driver/worker.h"

#include <libpq-fe.h>
#include <poll.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/stop.h"
#include "common/units.h"
#include "driver/connection.h"

namespace stallscope::driver::detail {
namespace {

struct CancelDeleter {
  void operator()(PGcancel* c) const noexcept { PQfreeCancel(c); }
};
using Cancel = std::unique_ptr<PGcancel, CancelDeleter>;

void send_cancels(const std::vector<Cancel>& cancels) noexcept {
  for (const auto& cancel : cancels) {
    char errbuf[256];
    PQcancel(cancel.get(), errbuf, sizeof errbuf);
  }
}

// Sends the cancel requests on a thread of their own, left to finish alone:
// PQcancel waits for the server to close the cancel connection, so a server
// that stopped answering would hold the driver thread, and SIGINT's end of
// the run, for as long as it hangs. That thread owns the PGcancel objects
// (independent of the connections) and touches nothing else. Without a
// thread to be had, they are sent here.
void cancel_detached(std::vector<Cancel> cancels) {
  if (cancels.empty()) return;
  auto owned = std::make_shared<const std::vector<Cancel>>(std::move(cancels));
  try {
    std::thread([owned] { send_cancels(*owned); }).detach();
  } catch (const std::system_error&) {
    send_cancels(*owned);
  }
}

}  // namespace

// Statement ids of the scripts' SQL commands, numbered in script order.
std::vector<std::vector<int>> number_statements(const std::vector<Script>& scripts) {
  std::vector<std::vector<int>> ids;
  int next = 0;
  for (const auto& s : scripts) {
    auto& v = ids.emplace_back();
    for (const auto& c : s.commands) v.push_back(c.kind == ScriptCommand::Kind::sql ? next++ : -1);
  }
  return ids;
}

inline void Worker::tick(std::int64_t now) {
  if (!stopping_ && should_stop(now)) {
    stopping_ = true;
    stop_mono_ns_ = now;
    if (options_.tcp_info_period_ns > 0) sample_tcp(now);  // the last second's too
  }
  if (stopping_) advance_stop(now);
  advance_timers(now);
  if (options_.tcp_info_period_ns > 0 && now >= next_tcp_mono_ns_) {
    sample_tcp(now);
    next_tcp_mono_ns_ = now + options_.tcp_info_period_ns;
  }
  if (now - last_flush_mono_ns_ >= kFlushIntervalNs) flush(now);
}

[[gnu::always_inline]] inline std::int64_t Worker::plan_wait(std::int64_t now,
                                                             std::vector<Client*>& unwatchable) {
  std::int64_t wake_ns = std::min(now + kPollSliceNs, last_flush_mono_ns_ + kFlushIntervalNs);
  if (options_.tcp_info_period_ns > 0) wake_ns = std::min(wake_ns, next_tcp_mono_ns_);
  if (deadline_mono_ns_ && !stopping_) wake_ns = std::min(wake_ns, *deadline_mono_ns_);
  unwatchable.clear();
  for (std::size_t i = 0; i < clients_.size(); ++i) {
    Client* c = clients_[i];
    const int fd = c->conn ? PQsocket(c->conn.get()) : -1;
    std::uint32_t want = 0;
    switch (c->state) {
      case ClientState::busy:
      case ClientState::rolling_back:
        want = EPOLLIN;
        break;
      case ClientState::resetting:
        want = c->reset_events == POLLIN ? EPOLLIN : EPOLLOUT;
        wake_ns = std::min(wake_ns, c->reset_started_mono_ns + kResetAttemptTimeoutNs);
        break;
      case ClientState::backoff:
        wake_ns = std::min(wake_ns, c->retry_at_mono_ns);
        break;
      case ClientState::throttling:
        wake_ns = std::min(wake_ns, *c->scheduled_mono_ns);
        break;
      case ClientState::sleeping:
        wake_ns = std::min(wake_ns, c->sleep_until_mono_ns);
        break;
      case ClientState::ready:
        wake_ns = now;
        break;
      case ClientState::idle:
      case ClientState::done:
        break;
    }
    if (!watch(*c, i, fd, want)) unwatchable.push_back(c);
  }
  // Winding down: look at the clients every 10 ms.
  if (stopping_) wake_ns = std::min(wake_ns, now + 10 * common::kNsPerMs);
  if (!unwatchable.empty() || wake_ns <= now) return 0;
  return wake_ns - now;
}

void Worker::run() {
  start(mono_now_ns());
  std::vector<epoll_event> events(std::max<std::size_t>(clients_.size(), 1));
  std::vector<Client*> unwatchable;  // ready at once: their socket cannot be registered
  while (active_ > 0) {
    const std::int64_t now = mono_now_ns();
    tick(now);
    if (active_ == 0) break;
    const std::int64_t timeout_ns = plan_wait(now, unwatchable);
    int n = epoll_.wait(events.data(), static_cast<int>(events.size()), timeout_ns);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::runtime, fmt::format("cannot wait for the driver's connections: {}",
                                                  std::strerror(errno)));
    }
    for (int i = 0; i < n; ++i) dispatch(*clients_[events[static_cast<std::size_t>(i)].data.u32]);
    // A socket libpq no longer has (e.g. closed after a failure): the
    // handler finds out what happened, as after poll()'s POLLNVAL.
    for (Client* c : unwatchable) dispatch(*c);
  }
  flush(mono_now_ns());
}

void Worker::start(std::int64_t now) {
  last_flush_mono_ns_ = now;
  pending_.queries.reserve(reserve_rows_);
  active_ = static_cast<int>(clients_.size());
  trigger_mono_ns_ = now;
  next_tcp_mono_ns_ = now;
  // Statement ids number the SQL commands in script order, as the names are
  // pushed here: id k is statement_names_[k].
  statement_ids_ = number_statements(options_.scripts);
  for (std::size_t s = 0; s < statement_ids_.size(); ++s) {
    for (std::size_t k = 0; k < statement_ids_[s].size(); ++k) {
      if (statement_ids_[s][k] >= 0) statement_names_.push_back(script_statement(s, k));
    }
  }
  if (options_.per_statement) {
    statement_sum_ns.assign(statement_names_.size(), 0);
    statement_count.assign(statement_names_.size(), 0);
  }
  if (options_.rate_tps) {
    // Mean gap between this thread's transactions, ns (pgbench: the rate is
    // shared equally among the threads).
    std::int64_t threads = threads_;
    next_gap_ = std::exponential_distribution<double>(*options_.rate_tps / common::kNsPerSDouble /
                                                      static_cast<double>(threads));
  }
  for (Client* c : clients_) send_next(*c, now);
}

void Worker::advance_timers(std::int64_t now_ns) {
  for (Client* c : clients_) {
    if (c->state == ClientState::backoff && now_ns >= c->retry_at_mono_ns) {
      if (options_.connect_per_transaction) {
        flush_failed_attempt(*c, now_ns);  // the failed connect's row ends here
        c->state = ClientState::idle;      // -C: the next transaction connects
        send_next(*c, now_ns);
      } else {
        start_reset_attempt(*c, now_ns);
      }
    } else if (c->state == ClientState::throttling && now_ns >= *c->scheduled_mono_ns) {
      c->state = ClientState::idle;
      send_next(*c, now_ns);
    } else if (c->state == ClientState::ready) {
      c->state = ClientState::idle;
      send_next(*c, now_ns);
    } else if (c->state == ClientState::sleeping && now_ns >= c->sleep_until_mono_ns) {
      c->slept_ns += now_ns - c->sleep_started_mono_ns;
      c->state = ClientState::busy;
      step_script(*c);
    } else if (c->state == ClientState::resetting &&
               now_ns - c->reset_started_mono_ns >= kResetAttemptTimeoutNs) {
      reset_attempt_failed(
          *c, now_ns,
          fmt::format("no answer within {} s", kResetAttemptTimeoutNs / common::kNsPerS));
    }
  }
}

// The run is over: nothing new is sent; in-flight transactions get
// kStopGraceNs to finish, then a cancel request, then kCancelWaitNs; those
// still without reply then, and a script's transaction in \sleep, are cut
// short: unfinished (record_unfinished).
void Worker::advance_stop(std::int64_t now_ns) {
  std::vector<Cancel> cancels;
  for (Client* c : clients_) {
    switch (c->state) {
      case ClientState::done:
        break;
      case ClientState::busy:
        if (!c->cancel_sent && now_ns - stop_mono_ns_ >= kStopGraceNs) {
          c->cancel_sent = true;
          if (Cancel cancel{PQgetCancel(c->conn.get())}) cancels.push_back(std::move(cancel));
        } else if (c->cancel_sent && now_ns - stop_mono_ns_ >= kStopGraceNs + kCancelWaitNs) {
          // Still no reply: unfinished (--pipeline: each one in flight).
          if (options_.pipeline > 0) {
            for (const Client::InFlight& f : c->inflight) {
              c->sent_wall_ns = f.sent_wall_ns;
              c->sent_mono_ns = f.sent_mono_ns;
              c->lag_ns.reset();
              record_unfinished(*c, now_ns);
            }
            c->inflight.clear();
          } else {
            record_unfinished(*c, now_ns);
          }
          finish(*c);
        }
        break;
      case ClientState::sleeping:  // a script's transaction, started; in \sleep until now
        c->slept_ns += now_ns - c->sleep_started_mono_ns;
        record_unfinished(*c, now_ns);
        finish(*c);
        break;
      default:  // idle, throttling, ready, rolling_back, resetting, backoff: no transaction
        finish(*c);
        break;
    }
  }
  cancel_detached(std::move(cancels));
}

void Worker::finish(Client& c) {
  if (c.state == ClientState::done) return;
  if (c.failed_attempt) flush_failed_attempt(c, mono_now_ns());
  c.state = ClientState::done;
  set_reconnecting(c, false);
  close_connection(c);  // the backend exits now, not when the driver is destroyed
  --active_;
}

void Worker::flush(std::int64_t now_ns) {
  last_flush_mono_ns_ = now_ns;
  if (pending_.empty()) return;
  std::size_t sent_rows = pending_.queries.size();
  sink_(std::move(pending_));
  pending_ = schema::Batch{};
  reserve_rows_ = std::clamp<std::size_t>(sent_rows + sent_rows / 4, 64, kFlushRows);
  pending_.queries.reserve(reserve_rows_);
}

}  // namespace stallscope::driver::detail
