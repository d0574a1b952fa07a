#include "trainer/metrics/history.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trainer/metrics/step_record.h"

namespace kubetune::train {
namespace {

struct Panel {
  double x0, y0, width, height;
};

std::string polyline(const Panel& p, const std::vector<double>& xs, const std::vector<double>& ys,
                     double xmin, double xmax, double ymin, double ymax, const char* color) {
  std::ostringstream out;
  out << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
  for (size_t i = 0; i < xs.size(); ++i) {
    double x = p.x0 + (xs[i] - xmin) / std::max(1e-12, xmax - xmin) * p.width;
    double y = p.y0 + p.height - (ys[i] - ymin) / std::max(1e-12, ymax - ymin) * p.height;
    out << x << "," << y << " ";
  }
  out << "\"/>\n";
  return out.str();
}

std::string axes(const Panel& p, const std::string& title, double xmin, double xmax, double ymin,
                 double ymax) {
  std::ostringstream out;
  out << "<rect x=\"" << p.x0 << "\" y=\"" << p.y0 << "\" width=\"" << p.width << "\" height=\""
      << p.height << "\" fill=\"none\" stroke=\"#888\"/>\n"
      << "<text x=\"" << p.x0 << "\" y=\"" << p.y0 - 8 << "\" font-size=\"14\">" << title
      << "</text>\n"
      << "<text x=\"" << p.x0 - 6 << "\" y=\"" << p.y0 + 10
      << "\" font-size=\"10\" text-anchor=\"end\">" << ymax << "</text>\n"
      << "<text x=\"" << p.x0 - 6 << "\" y=\"" << p.y0 + p.height
      << "\" font-size=\"10\" text-anchor=\"end\">" << ymin << "</text>\n"
      << "<text x=\"" << p.x0 << "\" y=\"" << p.y0 + p.height + 14 << "\" font-size=\"10\">step "
      << xmin << "</text>\n"
      << "<text x=\"" << p.x0 + p.width << "\" y=\"" << p.y0 + p.height + 14
      << "\" font-size=\"10\" text-anchor=\"end\">step " << xmax << "</text>\n";
  return out.str();
}

std::pair<double, double> range_of(const std::vector<double>& v) {
  if (v.empty()) return {0, 1};
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {*lo, *hi};
}

}  // namespace

std::string render_training_svg(const std::vector<double>& steps, const std::vector<double>& loss,
                                const std::vector<std::pair<double, double>>& eval_points,
                                const std::vector<double>& tokens_per_second) {
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"560\" "
         "font-family=\"sans-serif\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  const Panel top{70, 40, 660, 200}, bottom{70, 320, 660, 200};
  auto [xmin, xmax] = range_of(steps);
  std::vector<double> all_loss = loss;
  for (const auto& [s, l] : eval_points) all_loss.push_back(l);
  auto [lmin, lmax] = range_of(all_loss);
  svg << axes(top, "loss (blue: train, orange: eval)", xmin, xmax, lmin, lmax)
      << polyline(top, steps, loss, xmin, xmax, lmin, lmax, "#1f77b4");
  for (const auto& [s, l] : eval_points) {
    double x = top.x0 + (s - xmin) / std::max(1e-12, xmax - xmin) * top.width;
    double y = top.y0 + top.height - (l - lmin) / std::max(1e-12, lmax - lmin) * top.height;
    svg << "<circle cx=\"" << x << "\" cy=\"" << y << "\" r=\"4\" fill=\"#ff7f0e\"/>\n";
  }
  auto [tmin, tmax] = range_of(tokens_per_second);
  svg << axes(bottom, "tokens/s (this process)", xmin, xmax, std::min(0.0, tmin), tmax)
      << polyline(bottom, steps, tokens_per_second, xmin, xmax, std::min(0.0, tmin), tmax,
                  "#2ca02c")
      << "</svg>\n";
  return svg.str();
}

HistoryWriter::HistoryWriter(const std::string& output_dir) : dir_(output_dir) {
  std::filesystem::create_directories(dir_);
  jsonl_.open(dir_ + "/metrics_history.jsonl", std::ios::app);
}

void HistoryWriter::on_step(const StepStats& s) {
  steps_.push_back(static_cast<double>(s.step));
  losses_.push_back(s.loss);
  throughput_.push_back(s.tokens_per_second);
  jsonl_ << metrics::step_record(s).dump() << "\n";
  jsonl_.flush();
}

void HistoryWriter::on_eval(int64_t step, double eval_loss) {
  evals_.emplace_back(static_cast<double>(step), eval_loss);
  jsonl_ << metrics::eval_record(step, eval_loss).dump() << "\n";
  jsonl_.flush();
}

void HistoryWriter::on_finish(const StepStats&) {
  std::ofstream(dir_ + "/training_curves.svg")
      << render_training_svg(steps_, losses_, evals_, throughput_);
}

}  // namespace kubetune::train
