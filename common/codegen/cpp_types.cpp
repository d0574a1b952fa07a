#include "common/codegen/cpp_types.h"

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace kubetune::codegen {

std::string pascal(const std::string& name) {
  std::string out;
  bool up = true;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out;
}

// A last capital is no word of its own, as in a unit: gpuMemoryGiB -> gpu_memory_gib.
std::string snake(const std::string& name) {
  static const std::set<std::string> keywords = {
      "operator", "default",  "class",   "namespace", "template", "delete", "new",  "union",
      "auto",     "continue", "private", "public",    "register", "switch", "enum", "int",
      "bool",     "this",     "export",  "and",       "or",       "not",    "xor",  "signed"};
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool upper = std::isupper(static_cast<unsigned char>(c));
    if (upper && i > 0 && i + 1 < name.size() &&
        (std::islower(static_cast<unsigned char>(name[i - 1])) ||
         std::isdigit(static_cast<unsigned char>(name[i - 1])))) {
      out += '_';
    }
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return keywords.count(out) ? out + "_" : out;
}

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

std::string enum_constant(const std::string& value) { return "k" + pascal(value); }

namespace {

void write_enum_declaration(std::ostream& h, const Enum& e) {
  h << "\n";
  if (!e.comment.empty()) h << "// " << e.comment << "\n";
  h << "enum class " << e.name << " {";
  for (size_t i = 0; i < e.values.size(); ++i) h << (i ? ", " : " ") << enum_constant(e.values[i]);
  h << " };\ninline constexpr std::array<" << e.name << ", " << e.values.size() << "> k" << e.name
    << "Values = {";
  for (size_t i = 0; i < e.values.size(); ++i) {
    h << (i ? ", " : "") << e.name << "::" << enum_constant(e.values[i]);
  }
  h << "};\nstd::string to_string(" << e.name << " value);\n"
    << "// false when `text` is not one of the schema's values.\n"
    << "bool parse(std::string_view text, " << e.name << "& out);\n"
    << "std::ostream& operator<<(std::ostream& out, " << e.name << " value);\n"
    << "void to_json(nlohmann::json& j, " << e.name << " value);\n"
    << "void from_json(const nlohmann::json& j, " << e.name << "& value);\n";
}

void write_struct_declaration(std::ostream& h, const Struct& s) {
  h << "\n";
  if (!s.comment.empty()) h << "// " << s.comment << "\n";
  h << "struct " << s.name << (s.base.empty() ? "" : " : " + s.base) << " {\n";
  for (const auto& f : s.fields) {
    if (!f.comment.empty()) h << "  // " << f.comment << "\n";
    h << "  " << f.cpp_type << " " << f.cpp_name;
    h << (f.initializer.empty() ? "{}" : " = " + f.initializer);  // never uninitialized
    h << ";  // " << f.json_name << "\n";
  }
  if (s.keeps_unknown_fields) {
    h << "  // The object's other members, as read: written back unchanged.\n"
      << "  nlohmann::json unknown_fields = nlohmann::json::object();\n";
  }
  h << "};\nvoid to_json(nlohmann::json& j, const " << s.name << "& value);\n"
    << "void from_json(const nlohmann::json& j, " << s.name << "& value);\n";
}

void write_enum_definition(std::ostream& c, const Enum& e) {
  c << "\nstd::string to_string(" << e.name << " value) {\n  switch (value) {\n";
  for (const auto& v : e.values) {
    c << "    case " << e.name << "::" << enum_constant(v) << ":\n      return "
      << nlohmann::json(v).dump() << ";\n";
  }
  c << "  }\n  return \"\";\n}\n\nbool parse(std::string_view text, " << e.name
    << "& out) {\n  for (" << e.name << " v : k" << e.name
    << "Values) {\n    if (to_string(v) == text) {\n      out = v;\n      return true;\n    }\n  "
       "}\n"
    << "  return false;\n}\n\nstd::ostream& operator<<(std::ostream& out, " << e.name
    << " value) { return out << to_string(value); }\n\nvoid to_json(nlohmann::json& j, " << e.name
    << " value) { j = to_string(value); }\n\nvoid from_json(const nlohmann::json& j, " << e.name
    << "& value) { parse_enum(j, \"" << e.name << "\", value); }\n";
}

void write_struct_definition(std::ostream& c, const Struct& s) {
  c << "\nvoid to_json(nlohmann::json& j, const " << s.name << "& value) {\n";
  if (!s.base.empty()) {
    c << "  to_json(j, static_cast<const " << s.base << "&>(value));\n";
  } else if (s.keeps_unknown_fields) {
    c << "  j = value.unknown_fields;\n";
  } else {
    c << "  j = nlohmann::json::object();\n";
  }
  const char* omit_empty = s.keeps_unknown_fields ? "Omit::kWhenNothing" : "Omit::kWhenEmpty";
  for (const auto& f : s.fields) {
    c << "  write_field(j, \"" << f.json_name << "\", value." << f.cpp_name << ", "
      << (f.required || f.defaulted ? "Omit::kNever" : omit_empty) << ");\n";
  }
  c << "}\n\nvoid from_json(const nlohmann::json& j, " << s.name << "& value) {\n";
  if (!s.base.empty()) c << "  from_json(j, static_cast<" << s.base << "&>(value));\n";
  for (const auto& f : s.fields) {
    c << "  read_field(j, \"" << f.json_name << "\", value." << f.cpp_name << ");\n";
  }
  if (s.keeps_unknown_fields) {
    c << "  value.unknown_fields = unknown_members(j, {";
    for (size_t i = 0; i < s.fields.size(); ++i) {
      c << (i ? ", " : "") << "\"" << s.fields[i].json_name << "\"";
    }
    c << "});\n";
  }
  c << "}\n";
}

}  // namespace

std::string write_header(const Types& types) {
  std::ostringstream h;
  h << "// Generated from " << types.generated_from
    << ".\n// Do not edit: change the schema.\n#pragma once\n\n#include <array>\n#include "
       "<cstdint>\n#include <map>\n#include <nlohmann/json.hpp>\n#include <optional>\n#include "
       "<ostream>\n#include <string>\n#include <string_view>\n#include <vector>\n\nnamespace "
    << types.cpp_namespace << " {\n";
  for (const auto& e : types.enums) write_enum_declaration(h, e);
  for (const auto& s : types.structs) write_struct_declaration(h, s);
  h << "\n}  // namespace " << types.cpp_namespace << "\n";
  return h.str();
}

std::string write_source(const Types& types) {
  std::ostringstream c;
  c << "// Generated from " << types.generated_from << ".\n#include \"" << types.header_include
    << "\"\n\n#include \"common/api_json.h\"\n\nnamespace " << types.cpp_namespace
    << " {\n\nusing kubetune::api::Omit;\nusing kubetune::api::parse_enum;\nusing "
       "kubetune::api::read_field;\nusing kubetune::api::unknown_members;\nusing "
       "kubetune::api::write_field;\n";
  for (const auto& e : types.enums) write_enum_definition(c, e);
  for (const auto& s : types.structs) write_struct_definition(c, s);
  c << "\n}  // namespace " << types.cpp_namespace << "\n";
  return c.str();
}

void write_if_changed(const std::string& path, const std::string& text) {
  std::ifstream in(path);
  std::stringstream old;
  old << in.rdbuf();
  if (in && old.str() == text) return;
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace kubetune::codegen
