// An exclusive lock on a folder for the lifetime of a run: two runs given one
// checkpoint.dir would replace each other's checkpoints (and race on their renames).
#pragma once
#include <string>

namespace subdp {

class DirectoryLock {
 public:
  /// Creates `dir` if needed and takes an exclusive flock(2) on dir/subdp.lock, writing
  /// "host <name> pid <pid>" into it. The kernel releases the lock when the process ends,
  /// however it ends, so the lock of a dead run never blocks. Throws subdp::Error naming `key`,
  /// the folder and, when another process holds it, that holder's host and pid; a folder that
  /// cannot be created or written is an error too (the check before the first step).
  DirectoryLock(const std::string& dir, const std::string& key);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  /// The lock file's path.
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace subdp
