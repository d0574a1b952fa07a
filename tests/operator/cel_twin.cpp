// The C++ side of cel_rules_test.py: reads one JSON request per line on stdin and answers one JSON
// line on stdout, so that a real CEL implementation (cel-python) and our C++ twins are compared on
// the same objects.
//   {"op": "default", "object": {...}}  ->  {"object": <defaulted>, "problems": [...]}
//   {"op": "rules"}                     ->  {"rules": [{"where", "rule", "message"}...]}
//   {"op": "eval", "rule": "...", "self": ..., "oldSelf": ... (optional)}  ->  {"result": bool}
#include <iostream>
#include <string>

#include "operator/api/cel_rules.h"
#include "operator/api/job.h"

int main() {
  using nlohmann::json;
  using namespace kubetune::op;
  const kubetune::CelEvaluators twins = cel_evaluators();
  std::string line;
  while (std::getline(std::cin, line)) {
    const json req = json::parse(line);
    json out;
    const std::string op = req.at("op");
    if (op == "default") {
      json obj = req.at("object");
      out["problems"] = validate_job(obj);
      out["object"] = obj;
    } else if (op == "rules") {
      out["rules"] = json::array();
      for (const auto& r : cel_rules()) {
        out["rules"].push_back({{"where", r.where}, {"rule", r.rule}, {"message", r.message}});
      }
    } else if (op == "eval") {
      const json old = req.value("oldSelf", json());
      out["result"] = twins.at(req.at("rule"))(req.at("self"), old.is_null() ? nullptr : &old);
    } else {
      out["error"] = "unknown op " + op;
    }
    std::cout << out.dump() << std::endl;
  }
  return 0;
}
