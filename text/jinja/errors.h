// Exceptions of the template engine.
#pragma once

#include <stdexcept>
#include <string>

namespace kubetune::text::jinja {

// Thrown by raise_exception('msg'): what() is exactly the template's message.
class TemplateRaised : public std::runtime_error {
 public:
  explicit TemplateRaised(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace kubetune::text::jinja
