#include "result_json.hpp"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <vector>

namespace wallfacer::sim {
namespace {

using Json = nlohmann::ordered_json;

LinkKind parse_link_kind(const std::string& name) {
  for (LinkKind kind : {LinkKind::NvLink, LinkKind::Pcie, LinkKind::CpuBus, LinkKind::Network})
    if (name == to_string(kind)) return kind;
  throw std::runtime_error("simulation result names an unknown link kind '" + name + "'");
}

}  // namespace

std::string result_to_json(const SimResult& result, bool compact) {
  Json ranks = Json::array();
  for (const RankStats& r : result.ranks)
    ranks.push_back({{"rank", r.rank}, {"compute_ms", r.compute_ms}, {"comm_ms", r.comm_ms}, {"idle_ms", r.idle_ms}});
  Json classes = Json::array();
  for (const LinkClassStats& c : result.link_classes)
    classes.push_back({{"kind", to_string(c.kind)},
                       {"links", c.links},
                       {"bytes", c.bytes},
                       {"mean_utilization", c.mean_utilization},
                       {"max_utilization", c.max_utilization}});
  Json busiest = Json::array();
  for (const LinkStats& l : result.busiest_links)
    busiest.push_back(
        {{"name", l.name}, {"kind", to_string(l.kind)}, {"bytes", l.bytes}, {"utilization", l.utilization}});
  Json json = {{"step_ms", result.step_ms},
               {"forward_ms", result.forward_ms},
               {"backward_ms", result.backward_ms},
               {"activities", result.activities},
               {"transfers", result.transfers},
               {"wall_seconds", result.wall_seconds},
               {"layers", result.layers},
               {"composed_from", result.composed_from},
               {"ranks", ranks},
               {"links", {{"classes", classes}, {"busiest", busiest}}}};
  return compact ? json.dump() : json.dump(2);
}

SimResult result_from_json(const std::string& text) {
  Json json = Json::parse(text);
  SimResult result;
  result.step_ms = json.at("step_ms").get<double>();
  result.forward_ms = json.at("forward_ms").get<double>();
  result.backward_ms = json.at("backward_ms").get<double>();
  result.activities = json.at("activities").get<int64_t>();
  result.transfers = json.at("transfers").get<int64_t>();
  result.wall_seconds = json.at("wall_seconds").get<double>();
  result.layers = json.value("layers", 0);
  result.composed_from = json.value("composed_from", std::vector<int>{});
  for (const auto& r : json.at("ranks"))
    result.ranks.push_back({r.at("rank").get<int>(), r.at("compute_ms").get<double>(), r.at("comm_ms").get<double>(),
                            r.at("idle_ms").get<double>()});
  for (const auto& c : json.at("links").at("classes"))
    result.link_classes.push_back({parse_link_kind(c.at("kind").get<std::string>()), c.at("bytes").get<double>(),
                                   c.at("mean_utilization").get<double>(), c.at("max_utilization").get<double>(),
                                   c.at("links").get<int>()});
  for (const auto& l : json.at("links").at("busiest"))
    result.busiest_links.push_back({l.at("name").get<std::string>(), parse_link_kind(l.at("kind").get<std::string>()),
                                    l.at("bytes").get<double>(), l.at("utilization").get<double>()});
  return result;
}

}  // namespace wallfacer::sim
