// Stop signals: a handler that records, nothing else (async-signal safety).
#include "engine/train/stop_signals.h"

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "engine/core/error.h"

namespace subdp {

namespace {

volatile std::sig_atomic_t g_received = 0;

struct KnownSignal {
  const char* name;
  int signo;
};
constexpr KnownSignal kKnown[] = {
    {"SIGTERM", SIGTERM}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP}};

void record(int signo) {
  if (g_received == 0) {
    g_received = signo;
    return;
  }
  // A second one while the first is honoured: the default action (SIGTERM, SIGINT: exit).
  std::signal(signo, SIG_DFL);
  std::raise(signo);
}

}  // namespace

std::vector<int> parse_stop_signals(const std::string& names) {
  std::vector<int> out;
  size_t begin = 0;
  while (begin < names.size()) {
    size_t end = names.find(',', begin);
    if (end == std::string::npos) end = names.size();
    std::string name = names.substr(begin, end - begin);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    const std::string given = name;  // the message quotes what the user wrote
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));  // sigterm too
    if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
    int signo = 0;
    for (const KnownSignal& k : kKnown)
      if (name == k.name) signo = k.signo;
    SUBDP_CHECK(signo != 0,
                "[train] stop_signals = \"{}\": unknown signal \"{}\" (expected a comma-separated list of "
                "SIGTERM, SIGUSR1, SIGUSR2, SIGINT, SIGHUP, or \"\" for none)",
                names, given);
    out.push_back(signo);
    begin = end + 1;
  }
  return out;
}

std::string signal_name(int signo) {
  for (const KnownSignal& k : kKnown)
    if (signo == k.signo) return k.name;
  return "signal " + std::to_string(signo);
}

void install_stop_signals(const std::vector<int>& signals) {
  for (int signo : signals) {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = record;
    action.sa_flags = SA_RESTART;  // MPI's and the file writes' system calls resume
    sigemptyset(&action.sa_mask);
    SUBDP_CHECK(sigaction(signo, &action, nullptr) == 0, "cannot install the handler of {} ([train] stop_signals): {}",
                signal_name(signo), std::strerror(errno));
  }
}

int stop_signal_received() { return g_received; }

}  // namespace subdp
