// The Grafana dashboard and the alert rules may only use metrics (and labels) that the trainer and
// operator export, as listed in trainer_series.h / operator_series.h.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "common/metrics/operator_series.h"
#include "common/metrics/trainer_series.h"
#include "promql_references.h"

namespace kubetune::metrics::testing {
namespace {

using nlohmann::json;

struct Expression {
  std::string where;
  std::string promql;
};

std::string repo_file(const std::string& relative) {
  const char* repo = std::getenv("KUBETUNE_REPO_DIR");
  if (repo == nullptr) throw std::runtime_error("KUBETUNE_REPO_DIR is not set (set by ctest)");
  return std::string(repo) + "/" + relative;
}

const std::string kDashboard = "charts/kubetune/dashboards/kubetune-training.json";
const std::string kRules = "charts/kubetune/alerts/kubetune-rules.yaml";

json load_dashboard() {
  std::ifstream in(repo_file(kDashboard));
  if (!in) throw std::runtime_error("cannot open " + repo_file(kDashboard));
  return json::parse(in);
}

// Every "expr" anywhere in the panel tree (rows nest panels), named by the closest panel title.
void collect_panel_exprs(const json& node, const std::string& title, std::vector<Expression>& out) {
  if (node.is_array()) {
    for (const json& child : node) collect_panel_exprs(child, title, out);
    return;
  }
  if (!node.is_object()) return;
  const std::string here = node.contains("title") && node["title"].is_string()
                               ? node["title"].get<std::string>()
                               : title;
  for (const auto& [key, value] : node.items()) {
    if (key == "expr" && value.is_string()) {
      out.push_back({"panel \"" + here + "\"", value.get<std::string>()});
    } else {
      collect_panel_exprs(value, here, out);
    }
  }
}

std::vector<Expression> dashboard_expressions(const json& dashboard) {
  std::vector<Expression> out;
  collect_panel_exprs(dashboard.at("panels"), "", out);
  for (const json& variable : dashboard.at("templating").at("list")) {
    if (variable.value("type", "") != "query") continue;
    const json& query = variable.at("query");
    const std::string text =
        query.is_string() ? query.get<std::string>() : query.at("query").get<std::string>();
    out.push_back(
        {"variable \"" + variable.value("name", "") + "\"", grafana_query_expression(text)});
  }
  return out;
}

std::vector<Expression> rule_expressions(const YAML::Node& rules) {
  std::vector<Expression> out;
  for (const YAML::Node& group : rules["groups"]) {
    for (const YAML::Node& rule : group["rules"]) {
      const std::string name =
          rule["alert"] ? rule["alert"].as<std::string>() : rule["record"].as<std::string>();
      out.push_back({"rule \"" + name + "\"", rule["expr"].as<std::string>()});
    }
  }
  return out;
}

std::vector<std::string> all_problems(const std::vector<Expression>& expressions) {
  std::vector<std::string> problems;
  for (const Expression& e : expressions) {
    for (std::string& p : check_expression(e.promql, e.where)) problems.push_back(std::move(p));
  }
  return problems;
}

std::string joined(const std::vector<std::string>& lines) {
  std::ostringstream out;
  for (const auto& line : lines) out << line << "\n";
  return out.str();
}

// --- the scanner itself -----------------------------------------------------------------------

std::vector<std::string> names_in(const std::string& promql) {
  std::vector<std::string> names;
  for (const auto& ref : referenced_metrics(promql)) names.push_back(ref.name);
  return names;
}

TEST(PromqlReferences, SkipsFunctionsKeywordsLabelsStringsAndVariables) {
  using V = std::vector<std::string>;
  EXPECT_EQ(
      names_in("sum by (job, rank) (rate(kubetune_tokens_total{job=~\"$job\"}[$__rate_interval]))"),
      V{"kubetune_tokens_total"});
  EXPECT_EQ(names_in("sum(a) without (le) / on(job) group_left(rank) b offset 10m > bool 0.5e3"),
            V({"a", "b"}));
  EXPECT_EQ(names_in("histogram_quantile(0.95, sum by (le) (rate(x_bucket{k=\"a{b} c\"}[5m:1m])))"),
            V{"x_bucket"});
  EXPECT_EQ(names_in("x and ignoring(pod) y unless z or SUM BY (j) (w)"), V({"x", "y", "z", "w"}));
  EXPECT_EQ(names_in("label_replace(up, \"dst\", \"$1\", \"src\", \"(.*)\") * ${factor}"), V{"up"});
  auto refs = referenced_metrics("m{namespace=~\"$namespace\", phase!=\"x\"}");
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_EQ(refs[0].matcher_labels, (std::set<std::string>{"namespace", "phase"}));
}

TEST(PromqlReferences, GrafanaLabelValuesQueries) {
  EXPECT_EQ(grafana_query_expression("label_values(kubetune_step{namespace=~\"$namespace\"}, job)"),
            "kubetune_step{namespace=~\"$namespace\"}");
  EXPECT_EQ(grafana_query_expression("label_values(kubetune_step, namespace)"), "kubetune_step");
  EXPECT_EQ(grafana_query_expression("up"), "up");
}

TEST(PromqlReferences, ChecksNamesSuffixesAndLabels) {
  EXPECT_TRUE(check_expression("rate(kubetune_step_seconds_bucket{le=\"1\", rank=\"0\"}[5m])", "t")
                  .empty());
  EXPECT_TRUE(
      check_expression("kubetune_step_seconds_sum / kubetune_step_seconds_count", "t").empty());
  EXPECT_TRUE(
      check_expression("kubetune_operator_jobs{namespace=\"a\", phase=\"Failed\"}", "t").empty());
  // Suffixes only resolve for histograms; labels must belong to the metric.
  EXPECT_EQ(check_expression("kubetune_train_loss_sum", "t").size(), 1u);
  EXPECT_EQ(check_expression("kubetune_tokens_total_count", "t").size(), 1u);
  EXPECT_EQ(check_expression("kubetune_step{le=\"1\"}", "t").size(), 1u);
  EXPECT_EQ(check_expression("kubetune_step_phase_seconds_total{phaze=\"optimizer\"}", "t").size(),
            1u);
  const auto problems = check_expression("rate(kubetune_bogus_total[5m])", "panel \"X\"");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("panel \"X\": unknown metric \"kubetune_bogus_total\""),
            std::string::npos);
}

// --- the real files ---------------------------------------------------------------------------

TEST(Dashboard, EveryReferencedMetricIsExported) {
  const auto expressions = dashboard_expressions(load_dashboard());
  // Guards against the walk silently finding nothing.
  ASSERT_GE(expressions.size(), 30u);
  const auto problems = all_problems(expressions);
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

// A panel with an unknown metric, nested in a row like Grafana writes collapsed rows, must be
// caught: proves the check sees real panels and can fail.
TEST(Dashboard, PanelWithUnknownMetricIsCaught) {
  json dashboard = load_dashboard();
  json bad_panel = {
      {"type", "timeseries"},
      {"title", "Bogus"},
      {"targets", {{{"refId", "A"}, {"expr", "sum(rate(kubetune_bogus_total[5m]))"}}}}};
  dashboard["panels"].push_back({{"type", "row"}, {"title", "Extra"}, {"panels", {bad_panel}}});
  const auto problems = all_problems(dashboard_expressions(dashboard));
  ASSERT_EQ(problems.size(), 1u) << joined(problems);
  EXPECT_NE(problems[0].find("panel \"Bogus\": unknown metric \"kubetune_bogus_total\""),
            std::string::npos);

  json bad_variable = load_dashboard();
  bad_variable["templating"]["list"][2]["query"]["query"] = "label_values(kubetune_stepp, job)";
  EXPECT_EQ(all_problems(dashboard_expressions(bad_variable)).size(), 1u);
}

TEST(Dashboard, StructureGrafanaNeeds) {
  const json dashboard = load_dashboard();
  EXPECT_GE(dashboard.at("schemaVersion").get<int>(), 36);
  std::map<std::string, json> variables;
  for (const json& v : dashboard.at("templating").at("list")) variables[v.at("name")] = v;
  ASSERT_TRUE(variables.count("datasource"));
  EXPECT_EQ(variables["datasource"].at("type"), "datasource");
  EXPECT_EQ(variables["datasource"].at("query"), "prometheus");
  for (const char* name : {"namespace", "job"}) {
    ASSERT_TRUE(variables.count(name)) << name;
    EXPECT_EQ(variables[name].at("type"), "query");
    EXPECT_EQ(variables[name].at("datasource").at("uid"), "${datasource}");
  }
  // Every panel and target reads from the selected data source; ids are unique.
  std::set<int> ids;
  for (const json& panel : dashboard.at("panels")) {
    EXPECT_TRUE(ids.insert(panel.at("id").get<int>()).second) << panel.at("id");
    if (panel.at("type") == "row") continue;
    EXPECT_EQ(panel.at("datasource").at("uid"), "${datasource}") << panel.at("title");
    for (const json& target : panel.at("targets")) {
      EXPECT_EQ(target.at("datasource").at("uid"), "${datasource}") << panel.at("title");
      const std::string expr = target.at("expr");
      // Per-job panels must follow the job selector (operator-wide panels are exempt).
      if (expr.find("kubetune_operator_") == std::string::npos) {
        EXPECT_NE(expr.find("job=~\"$job\""), std::string::npos)
            << panel.at("title") << ": " << expr;
      }
    }
  }
}

TEST(AlertRules, EveryReferencedMetricIsExported) {
  const YAML::Node rules = YAML::LoadFile(repo_file(kRules));
  const auto expressions = rule_expressions(rules);
  ASSERT_GE(expressions.size(), 5u);
  const auto problems = all_problems(expressions);
  EXPECT_TRUE(problems.empty()) << joined(problems);

  YAML::Node bad = YAML::Clone(rules);
  YAML::Node rule;
  rule["alert"] = "Bogus";
  rule["expr"] = "kubetune_step{rnak=\"0\"} > 1";
  bad["groups"][0]["rules"].push_back(rule);
  EXPECT_EQ(all_problems(rule_expressions(bad)).size(), 1u);
}

TEST(AlertRules, RequiredAlertsHaveSummaryAndDescription) {
  const YAML::Node rules = YAML::LoadFile(repo_file(kRules));
  std::set<std::string> alerts;
  for (const YAML::Node& group : rules["groups"]) {
    for (const YAML::Node& rule : group["rules"]) {
      if (!rule["alert"]) continue;
      const std::string name = rule["alert"].as<std::string>();
      alerts.insert(name);
      EXPECT_FALSE(rule["annotations"]["summary"].as<std::string>("").empty()) << name;
      EXPECT_FALSE(rule["annotations"]["description"].as<std::string>("").empty()) << name;
      EXPECT_TRUE(rule["labels"]["severity"]) << name;
    }
  }
  for (const char* required :
       {"KubetuneJobFailed", "KubetuneJobRestarting", "KubetuneThroughputHalved",
        "KubetuneRankStalled", "KubetuneGpuMemoryNearLimit"}) {
    EXPECT_TRUE(alerts.count(required)) << required;
  }
}

TEST(SeriesTables, NamesAreValidUniqueAndTyped) {
  std::set<std::string_view> seen;
  auto check = [&](const SeriesSpec& spec) {
    EXPECT_TRUE(seen.insert(spec.name).second) << spec.name;
    EXPECT_EQ(spec.name.substr(0, 9), "kubetune_") << spec.name;
    const bool ends_total =
        spec.name.size() > 6 && spec.name.substr(spec.name.size() - 6) == "_total";
    EXPECT_EQ(ends_total, spec.type == MetricType::kCounter) << spec.name;
    EXPECT_FALSE(spec.help.empty()) << spec.name;
  };
  for (const auto& spec : trainer_series::kAll) {
    check(spec);
    EXPECT_EQ(spec.labels.substr(0, trainer_series::kRankLabels.size()),
              trainer_series::kRankLabels);
  }
  for (const auto& spec : operator_series::kAll) check(spec);
}

}  // namespace
}  // namespace kubetune::metrics::testing
