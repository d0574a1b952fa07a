// C++ types written from a JSON schema: the part both generators share (the FineTuneJob's from
// common/finetunejob_schema.json, the Kubernetes objects' from the API server's OpenAPI documents).
// A generator reads its schema into these plain descriptions; write_header/write_source turn them
// into one struct per object, one enum class per string enum, and their nlohmann::json conversions.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace kubetune::codegen {

struct Field {
  std::string json_name;
  std::string cpp_name;
  std::string cpp_type;
  std::string initializer;  // "" = value-initialized (zero, empty)
  std::string comment;
  bool required = false;   // always written, even when empty
  bool defaulted = false;  // the schema has a default: always written too
};

struct Struct {
  std::string name;
  std::string base;  // "" or the struct it extends
  std::string comment;
  std::vector<Field> fields;
  // The members of the JSON object that `fields` does not name are kept in `unknown_fields` and
  // written back as they were read: an object that another controller also writes loses nothing.
  bool keeps_unknown_fields = false;
};

struct Enum {
  std::string name;
  std::string comment;
  std::vector<std::string> values;
};

// What is written and where: the structs come in the order they are defined (a struct after the
// structs of its members).
struct Types {
  std::string generated_from;  // "common/finetunejob_schema.json by common/codegen/..."
  std::string header_include;  // how the source includes the header: "common/finetunejob_types.h"
  std::string cpp_namespace;   // "kubetune::api"
  std::vector<Enum> enums;
  std::vector<Struct> structs;
};

std::string write_header(const Types& types);
std::string write_source(const Types& types);

// Names: gradientCheckpointing -> GradientCheckpointing / gradient_checkpointing.
std::string pascal(const std::string& name);
std::string snake(const std::string& name);
std::string one_line(std::string text);
std::string enum_constant(const std::string& value);

// Writes `text` unless the file already holds it (keeps the timestamp: nothing recompiles).
void write_if_changed(const std::string& path, const std::string& text);

[[noreturn]] inline void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + ": " + why);
}

}  // namespace kubetune::codegen
