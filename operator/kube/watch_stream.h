// One open watch: newline-delimited JSON events ({type, object}) read as they arrive.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

namespace kubetune::op::kube {

class WatchStream {
 public:
  struct Impl;
  explicit WatchStream(std::unique_ptr<Impl> impl);
  ~WatchStream();

  // Blocks for the next event; false when the server ended the stream (or cancel() was called).
  // Throws ApiError (code 0) when the connection fails.
  bool next(nlohmann::json& event);
  // Aborts the stream from another thread; next() then returns false.
  void cancel();

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kubetune::op::kube
