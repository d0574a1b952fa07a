// Loaded with LD_PRELOAD into the training processes by dist_test.py: on the rank named by
// SLOW_FSYNC_RANK, every fsync sleeps SLOW_FSYNC_SECONDS first, as on a slow volume, so that rank 0
// writing a checkpoint takes longer than distributed.timeoutSeconds without any hook in the
// trainer.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" int fsync(int fd) {
  using Fsync = int (*)(int);
  static const auto real = reinterpret_cast<Fsync>(dlsym(RTLD_NEXT, "fsync"));
  const char* rank = std::getenv("RANK");
  const char* slow_rank = std::getenv("SLOW_FSYNC_RANK");
  const char* seconds = std::getenv("SLOW_FSYNC_SECONDS");
  if (rank && slow_rank && seconds && std::strcmp(rank, slow_rank) == 0)
    usleep(static_cast<useconds_t>(std::atof(seconds) * 1e6));
  return real(fd);
}
