// flock(2) on a lock file: released by the kernel with the process, so never stale.
#include "engine/io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/core/error.h"

namespace subdp {

namespace {

std::string read_holder(int fd) {
  char text[256] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder = n > 0 ? std::string(text, n) : "an unknown process";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder;
}

std::string this_process() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  return fmt::format("host {} pid {}\n", host, static_cast<long>(::getpid()));
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& key) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  SUBDP_CHECK(!ec, "{} = \"{}\": cannot create the folder: {}", key, dir, ec.message());
  SUBDP_CHECK(std::filesystem::is_directory(dir, ec), "{} = \"{}\": not a folder", key, dir);
  path_ = (std::filesystem::path(dir) / "subdp.lock").string();
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  SUBDP_CHECK(fd_ >= 0, "{} = \"{}\": cannot write in the folder ({}: {})", key, dir, path_, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_holder(fd_);
    ::close(fd_);
    fd_ = -1;
    SUBDP_CHECK(err != EWOULDBLOCK,
                "{} = \"{}\" is in use by another run ({}, lock file {}); give this run its own "
                "folder, or wait for that one to end",
                key, dir, holder, path_);
    throw Error(fmt::format("{} = \"{}\": cannot lock {}: {}", key, dir, path_, std::strerror(err)));
  }
  const std::string me = this_process();
  const bool written =
      ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
  if (!written) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw Error(fmt::format("{} = \"{}\": cannot write {}: {}", key, dir, path_, std::strerror(err)));
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race a new run's open)
}

}  // namespace subdp
