// Graceful stop on a scheduler's signal (Slurm sends SIGTERM at a time limit or on
// preemption, and SIGUSR1 some time before when asked with --signal): the handler only
// records the signal; the trainer reads it once per step, agrees on it with every rank in
// the step's existing flag all-reduce, checkpoints and exits with kExitStopped.
#pragma once
#include <string>
#include <vector>

namespace subdp {

/// Exit status of a run stopped by a stop signal after writing its checkpoint: a job
/// script tests it to requeue (sysexits.h EX_TEMPFAIL, "try again later"). Without a
/// checkpoint.dir nothing is saved and the run exits with 128 + the signal's number, as a
/// process killed by it would.
constexpr int kExitStopped = 75;

/// Parses train.stop_signals ("SIGTERM,SIGUSR1", "" = none) into signal numbers. Throws
/// subdp::Error naming the key and the unknown name (SIGTERM, SIGUSR1, SIGUSR2, SIGINT, SIGHUP).
std::vector<int> parse_stop_signals(const std::string& names);

/// Name of a signal number for messages ("SIGTERM").
std::string signal_name(int signo);

/// Installs the recording handler for `signals` (idempotent). A second stop signal while a
/// stop is pending takes its default action (a user who presses Ctrl-C twice wants out).
void install_stop_signals(const std::vector<int>& signals);

/// The first stop signal received since install_stop_signals, or 0. Async-signal safe to set,
/// cheap to read (one atomic load).
int stop_signal_received();

}  // namespace subdp
