// The subdp command line: `subdp train CONFIG`, `subdp plan CONFIG`, `subdp compare CONFIG ...`
// (runs benchmarks/compare.py), `subdp sample CHECKPOINT`, `subdp version`.
// Exit codes: 0 success, 1 error (subdp::Error or any exception), 2 bad command line.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/cli/commands.h"
#include "engine/cli/suggest.h"
#include "engine/comm/communicator.h"
#include "engine/config/config.h"
#include "engine/core/error.h"
#include "engine/subnet/plan.h"

namespace {

/// "1000", "1.5GB", "512MiB", "2 GiB", "64k" -> bytes. Decimal (kB, MB, GB, TB) and
/// binary (KiB, MiB, GiB, TiB) units; a bare K/M/G/T is binary; decimal digits only (std::stod
/// would read hex). Throws subdp::Error.
double parse_bytes(const std::string& text) {
  SUBDP_CHECK(text.find_first_of("xX") == std::string::npos, "invalid byte count '{}': decimal only", text);
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw subdp::Error(fmt::format("invalid byte count '{}' (e.g. 2000000000, 1.5GB, 512MiB)", text));
  }
  std::string unit;
  for (char ch : text.substr(pos))
    if (!std::isspace(static_cast<unsigned char>(ch)))
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  struct Unit {
    const char* name;
    double scale;
  };
  static const Unit units[] = {{"", 1},
                               {"b", 1},
                               {"kb", 1e3},
                               {"mb", 1e6},
                               {"gb", 1e9},
                               {"tb", 1e12},
                               {"k", 1024.0},
                               {"kib", 1024.0},
                               {"m", 1048576.0},
                               {"mib", 1048576.0},
                               {"g", 1073741824.0},
                               {"gib", 1073741824.0},
                               {"t", 1099511627776.0},
                               {"tib", 1099511627776.0}};
  for (const Unit& u : units)
    if (unit == u.name) {
      SUBDP_CHECK(std::isfinite(value) && value >= 0, "invalid byte count '{}': must be a finite number >= 0", text);
      return value * u.scale;
    }
  throw subdp::Error(fmt::format(
      "invalid byte count '{}': unknown unit '{}' (use B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)", text, unit));
}

/// CLI11 check for --simulate-rank: "w/W" with 0 <= w < W <= 2^20 (plan --world's cap).
std::string check_simulate_rank(const std::string& s) {
  long long w = -1, world = -1;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%lld/%lld%c", &w, &world, &tail) != 2 || w < 0 || world < 1 || w >= world ||
      world > (1 << 20))
    return "expected w/W with 0 <= w < W <= 1048576 (e.g. 1/4), got '" + s + "'";
  return "";
}

/// CLI11 check for --seed: a whole number in [0, 2^64 - 1], written in decimal. CLI11 alone
/// wraps -1 to 2^64 - 1 and clamps larger values, so different seeds gave the same draws.
std::string check_seed(const std::string& s) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    return "expected a whole number in [0, 18446744073709551615], got '" + s + "'";
  return "";
}

/// A memory budget: a byte count of at least 1 byte and at most 1 EB.
double parse_budget(const std::string& s) {
  const double bytes = parse_bytes(s);
  SUBDP_CHECK(bytes >= 1 && bytes <= 1e18, "invalid budget '{}': expected 1 byte to 1 EB per rank", s);
  return bytes;
}

std::string check_bytes(const std::string& s) {
  try {
    parse_budget(s);
    return "";
  } catch (const subdp::Error& e) {
    return e.what();
  }
}

/// A finite number >= 0 (CLI::NonNegativeNumber lets "nan" through: no comparison fails).
std::string check_finite_nonnegative(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !std::isfinite(v) || v < 0)
    return "expected a finite number >= 0, got '" + s + "'";
  return "";
}

/// A CLI11 validator: a whole number in [lo, hi] ("lo_text" names lo's meaning, e.g. "0 (all
/// bytes)"); CLI::Range printed "Value abc not in range" and bounds of 300 digits.
CLI::Validator whole_number(long long lo, long long hi, const std::string& lo_text) {
  return CLI::Validator(
      [=](const std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (end == s.c_str() || *end != '\0' || errno != 0 || v < lo || v > hi)
          return fmt::format("expected a whole number from {} to {}, got '{}'", lo_text, hi, s);
        return "";
      },
      "");
}

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  subdp::TrainOptions train;
  int world = 0;
  std::string budget;
  long long deal = 0;
  bool json = false;
};

void add_config_args(CLI::App* cmd, Args& a) {
  cmd->add_option("CONFIG", a.config, "TOML run config (see configs/README.md)")->required();
  cmd->add_option("--set", a.overrides, "override a config key: table.key=value (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);  // one value per --set: `--set a=1 CONFIG` keeps CONFIG
}

#ifndef SUBDP_SOURCE_DIR
#define SUBDP_SOURCE_DIR "."
#endif

/// `subdp compare CONFIG [options]`: replaces this process with
/// `/usr/bin/python3 <source>/benchmarks/compare.py --binary <this executable> CONFIG [options]`
/// (a --binary among the options wins). Returns only when the exec fails.
int exec_compare(const std::vector<std::string>& extras) {
  const std::string script = std::string(SUBDP_SOURCE_DIR) + "/benchmarks/compare.py";
  const char* python = "/usr/bin/python3";
  std::vector<std::string> args = {python, script};
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) args.insert(args.end(), {"--binary", std::string(self, static_cast<size_t>(n))});
  args.insert(args.end(), extras.begin(), extras.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execv(python, argv.data());
  std::fprintf(stderr, "subdp: error: cannot run %s %s: %s\n", python, script.c_str(), std::strerror(errno));
  return 1;
}

/// Options of `subdp parity-dump` and `subdp sample`.
struct ParityArgs {
  std::string out;
  int steps = 10;
};
struct SampleArgs {
  std::string checkpoint, prompt;
  int tokens = 256, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 0;
};

CLI::App* add_train(CLI::App& app, Args& a) {
  CLI::App* train = app.add_subcommand("train", "train a model per CONFIG");
  add_config_args(train, a);
  train
      ->add_option("--simulate-rank", a.train.simulate_rank,
                   "run rank w of a W-rank layout alone (local stand-in communicator)")
      ->type_name("w/W")
      ->check(CLI::Validator(check_simulate_rank, ""));
  return train;
}

CLI::App* add_plan(CLI::App& app, Args& a) {
  CLI::App* plan = app.add_subcommand("plan", "print the subnetwork plan and predicted memory");
  add_config_args(plan, a);
  plan->add_option("--world", a.world, "world size W (default: MPI world size or S)")
      ->check(whole_number(1, 1 << 20, "1"));
  plan->add_option(
          "--budget", a.budget,
          "per-rank memory budget, e.g. 512MiB, 2GiB, 1.5GB: prints the largest batch and keep ratio that "
          "fit, and every regime with ZeRO-1 / ZeRO-2 / FSDP / recompute that fits at the configured batch, smallest "
          "first")
      ->type_name("BYTES")
      ->check(CLI::Validator(check_bytes, ""));
  plan->add_option("--deal", a.deal,
                   "print the plan of re-deal D (mask.redeal_every: the plan in use from step D*K + 1), drawn from "
                   "its plan seed; default 0, the configured plan")
      ->type_name("D")
      ->check(CLI::Range(0LL, 1LL << 50));
  plan->add_flag("--json", a.json,
                 "print the same content as one JSON object on stdout (keys and units: docs/outputs.md)");
  return plan;
}

CLI::App* add_parity(CLI::App& app, Args& a, ParityArgs& p) {
  CLI::App* parity = app.add_subcommand(
      "parity-dump", "write initial weights, a batch, outputs and gradients for the PyTorch parity tests");
  add_config_args(parity, a);
  parity->add_option("OUT_DIR", p.out, "directory for the safetensors files")->required();
  parity->add_option("--steps", p.steps, "optimizer steps whose losses are recorded")
      ->check(whole_number(0, 1 << 20, "0"));
  return parity;
}

CLI::App* add_sample(CLI::App& app, Args& a, SampleArgs& s) {
  CLI::App* sample = app.add_subcommand("sample", "generate text with a byte-level GPT or LLaMA checkpoint");
  sample->add_option("CHECKPOINT", s.checkpoint, "checkpoint directory (or a checkpoint.dir: newest)")->required();
  sample->add_option("--prompt", s.prompt, "text to continue");
  sample->add_option("--tokens", s.tokens, "bytes to generate")->check(CLI::Range(0, 1 << 30));
  sample->add_option("--temperature", s.temperature, "softmax temperature; 0 = greedy")
      ->check(CLI::Validator(check_finite_nonnegative, ""));
  sample->add_option("--top-k", s.top_k, "sample among the k most likely bytes; 0 = all")
      ->check(whole_number(0, INT_MAX, "0 (all bytes)"));
  sample->add_option("--seed", s.seed, "seed of the draws")->check(CLI::Validator(check_seed, "UINT64"));
  sample->add_option("--set", a.overrides, "override a key of the checkpoint's config: table.key=value")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  return sample;
}

/// `subdp plan` once the config is read: the world size from --world or the launcher.
int plan_command(subdp::Config config, const Args& a, const subdp::LauncherLayout& launched) {
  const int world = a.world > 0 ? a.world : launched.size > 1 ? launched.size : 0;
  SUBDP_CHECK(world == 0 || a.world > 0 || world % config.parallel.subnetworks == 0,
              "the launcher's world size {} (mpirun -np) is not a multiple of parallel.subnetworks = {}; give "
              "--world or launch a multiple",
              world, config.parallel.subnetworks);
  SUBDP_CHECK(a.deal == 0 || config.mask.redeal_every > 0,
              "--deal {}: this config never re-deals its plan (mask.redeal_every = 0), so its runs use deal 0 "
              "alone; set mask.redeal_every (e.g. --set mask.redeal_every=100) to see the plan of deal D",
              a.deal);
  if (a.deal > 0) config.mask.seed = subdp::deal_seed(config.mask.seed, a.deal);
  return subdp::run_plan(config, world, {a.budget.empty() ? 0.0 : parse_budget(a.budget), a.json, a.deal});
}

/// argv[1..] in the reverse order CLI11's vector parse consumes, with an empty value after
/// '=' ("--prompt=") split into the option and an explicit empty argument: CLI11 would take
/// the next argument as the value instead ("--prompt= --tokens 5" gave "--tokens" as the prompt).
std::vector<std::string> cli_arguments(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.back() == '=' && arg.find('=') == arg.size() - 1) {
      args.push_back(arg.substr(0, arg.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(arg);
    }
  }
  return {args.rbegin(), args.rend()};
}

/// The error for an unknown first word or an option before the command, naming it with the
/// commands and a suggestion (CLI11 alone says "A subcommand is required"); empty for a command
/// or --help. `args` is in cli_arguments' reverse order.
std::string unknown_command(const CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty() || args.back().empty()) return "";
  const std::string& first = args.back();
  if (first == "-h" || first == "--help") return "";
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (std::find(names.begin(), names.end(), first) != names.end()) return "";
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  // An option before any command: subdp's options all belong to a command.
  if (first[0] == '-')
    return fmt::format("unknown option '{}' before a command; the commands are {} (subdp --help)", first, list);
  return fmt::format("unknown command '{}'{}; the commands are {} (subdp --help)", first,
                     subdp::suggestion(first, names), list);
}

int run(int argc, char** argv) {
  CLI::App app{"subdp: hybrid data parallelism with subnetwork masking (arXiv:2507.09029)", "subdp"};
  app.require_subcommand(1);
  Args a;
  ParityArgs p;
  SampleArgs s;
  CLI::App* train = add_train(app, a);
  CLI::App* plan = add_plan(app, a);
  CLI::App* compare = app.add_subcommand(
      "compare",
      "compare DP and the masking regimes (runs benchmarks/compare.py; `subdp compare --help` for its options)");
  compare->allow_extras();
  compare->set_help_flag();  // --help goes to compare.py
  CLI::App* version =
      app.add_subcommand("version", "print the version and compiled-in backends (also subdp --version)");
  CLI::App* parity = add_parity(app, a, p);
  CLI::App* sample = add_sample(app, a, s);
  try {
    std::vector<std::string> args = cli_arguments(argc, argv);
    if (args.size() == 1 && (args[0] == "--version" || args[0] == "-V")) return subdp::run_version();
    if (const std::string unknown = unknown_command(app, args); !unknown.empty()) {
      std::fprintf(stderr, "subdp: error: %s\n", unknown.c_str());
      return 2;  // a bad command line, as CLI11's own errors
    }
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, or the message and a hint
    return code == 0 ? 0 : 2;
  }

  if (*version) return subdp::run_version();
  if (*compare) return exec_compare(compare->remaining());
  // Under mpirun the plan and sample need no collective: rank 0 alone runs (the plan for the
  // launcher's world size); the other ranks exit quietly instead of printing it again.
  const subdp::LauncherLayout launched = subdp::launcher_layout();
  if ((*plan || *sample) && launched.rank != 0) return 0;
  if (*sample) return subdp::run_sample(s.checkpoint, s.prompt, s.tokens, s.temperature, s.top_k, s.seed, a.overrides);
  subdp::Config config = subdp::load_config(a.config, a.overrides);
  if (*train) return subdp::run_train(config, a.train);
  if (*parity) return subdp::run_parity_dump(config, p.out, p.steps);
  if (*plan) return plan_command(std::move(config), a, launched);
  return 2;
}

/// rc, once stdout is flushed; 1 (unless rc is already an error) when anything written to it was
/// lost: `subdp plan --json > out.json` on a full disk left a truncated file and exit 0.
int with_stdout_flushed(int rc) {
  const int err = std::fflush(stdout) != 0 ? errno : 0;  // std::cout writes through stdout's buffer
  if (!std::ferror(stdout)) return rc;
  std::fprintf(stderr, "subdp: error: writing the standard output failed: %s\n",
               err != 0 ? std::strerror(err) : "an earlier write was lost");
  return rc == 0 ? 1 : rc;
}

}  // namespace

int main(int argc, char** argv) {
  return with_stdout_flushed([&] {
    try {
      return run(argc, argv);
    } catch (const subdp::Error& e) {
      std::fprintf(stderr, "subdp: error: %s\n", e.what());
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr,
                   "subdp: error: out of host memory (std::bad_alloc): the configuration's sizes ([model] keys, "
                   "train.batch_size) need more memory than this process can get; `subdp plan CONFIG` prints the "
                   "bytes a run needs\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "subdp: error: %s\n", e.what());
    }
    return 1;
  }());
}
