// Reads NCCL's topology XML (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE, `<system version="1">`):
// `<cpu>` sockets, the `<pci>` tree (class 0x0604 bridges and switches, 0x0302 GPUs, 0x0207 and
// 0x0200 NICs) with link_speed and link_width, `<gpu>` with its `<nvlink>` edges, and `<nic>`
// with one `<net>` per port. Works on full dumps and on the PCI skeletons cloud vendors publish
// (no `<gpu>` or `<net>` children); what a file leaves out is assumed and said.
#include <fmt/format.h>
#include <tinyxml2.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include <wallfacer/core/errors.hpp>
#include "import_model.hpp"

namespace wallfacer::detail {
namespace {

using tinyxml2::XMLElement;

// Per-link NVLink rates per direction, nominal (NVLink 1: 20 GB/s, NVLink 2-4: 25 GB/s, the
// A40/RTX bridge 14.0625 GB/s, NVLink 5: 50 GB/s), by compute capability.
std::pair<double, const char*> nvlink_rate(int sm) {
  if (sm >= 100) return {50, "NVLink 5, 50 GB/s per link per direction (sm >= 100)"};
  if (sm == 86) return {14.0625, "NVLink bridge of sm 86 boards, 14.0625 GB/s per link per direction"};
  if (sm >= 70) return {25, "NVLink 2-4, 25 GB/s per link per direction (sm 70-90)"};
  return {20, "NVLink 1, 20 GB/s per link per direction (sm 60)"};
}

class XmlReader {
 public:
  XmlReader(const std::string& source, const ImportOptions& options) : source_(source), options_(options) {
    node_.input_label = "NCCL topology XML " + source;
  }

  ImportedNode read(const std::string& text);

 private:
  [[noreturn]] void fail(const XMLElement* element, const std::string& message) const {
    throw InputError(source_, element ? element->GetLineNum() : 0, message);
  }
  std::string describe(const XMLElement* element) const;
  const char* required(const XMLElement* element, const char* attribute, const char* expected) const;
  long integer(const XMLElement* element, const char* attribute, const char* expected, bool must) const;
  int pci_class(const XMLElement* element) const;
  Sourced link_rate(const XMLElement* element);
  std::optional<double> link_speed_gts(const XMLElement* element) const;

  void read_cpu(const XMLElement* cpu);
  void read_pci(const XMLElement* pci, int cpu, int parent_switch);
  void read_gpu(const XMLElement* pci, int cpu, int parent_switch);
  void read_nics(const XMLElement* holder, const XMLElement* pci, int cpu, int parent_switch);
  void order_by_dev();
  void resolve_nvlinks();
  void resolve_gpu_model();
  void resolve_cpu_link(const XMLElement* first_cpu);
  void keep_fastest_nics();

  struct RawGpu {
    std::string busid;
    int line = 0;
    int dev = -1;
    int sm = 0;
    std::string device_id;
    struct Edge {
      std::string target;
      int tclass = 0;
      int count = 0;
      int line = 0;
    };
    std::vector<Edge> nvlinks;
  };
  struct RawNic {
    int dev = -1;
  };

  const std::string& source_;
  const ImportOptions& options_;
  ImportedNode node_;
  std::vector<RawGpu> raw_gpus_;
  std::vector<RawNic> raw_nics_;
  double fastest_gts_ = 0;  // of any link in the file, for links whose speed is not given
  int unknown_width_ = 0, unknown_speed_ = 0;
  std::vector<std::string> ignored_;
};

std::string XmlReader::describe(const XMLElement* element) const {
  std::string text = fmt::format("<{}", element->Name());
  for (const char* key : {"busid", "name", "dev", "numaid", "target"})
    if (const char* value = element->Attribute(key)) text += fmt::format(" {}=\"{}\"", key, value);
  return text + ">";
}

const char* XmlReader::required(const XMLElement* element, const char* attribute, const char* expected) const {
  const char* value = element->Attribute(attribute);
  if (!value)
    fail(element, fmt::format("{} lacks attribute '{}' (expected {})", describe(element), attribute, expected));
  return value;
}

long XmlReader::integer(const XMLElement* element, const char* attribute, const char* expected, bool must) const {
  const char* value = must ? required(element, attribute, expected) : element->Attribute(attribute);
  if (!value) return -1;
  const std::string text = value;
  size_t used = 0;
  long parsed = 0;
  try {
    parsed = std::stol(text, &used, 0);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || parsed < 0)
    fail(element,
         fmt::format("{} attribute '{}': expected {}, found \"{}\"", describe(element), attribute, expected, text));
  return parsed;
}

int XmlReader::pci_class(const XMLElement* element) const {
  return static_cast<int>(integer(element, "class", "a PCI class code such as 0x060400", true));
}

std::optional<double> XmlReader::link_speed_gts(const XMLElement* element) const {
  const char* value = element->Attribute("link_speed");
  if (!value || !*value) return std::nullopt;
  const std::string text = value;
  size_t used = 0;
  double gts = 0;
  try {
    gts = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string rest = used ? text.substr(used) : "";
  if (used == 0 || rest.find("GT/s") == std::string::npos || pcie_GBps(gts, 1) == 0)
    fail(element, fmt::format("{} attribute 'link_speed': expected a PCIe rate such as \"16.0 GT/s PCIe\" (2.5, 5, 8, "
                              "16, 32 or 64 GT/s), found \"{}\"",
                              describe(element), text));
  return gts;
}

// The element's own link to its parent, from link_speed and link_width. NCCL reads width 0 as
// x16; a missing speed takes the fastest speed of the file (NCCL falls back to Gen3).
Sourced XmlReader::link_rate(const XMLElement* element) {
  const std::optional<double> gts = link_speed_gts(element);
  long width = integer(element, "link_width", "a lane count such as 16", false);
  std::string source = fmt::format("[C] {}: PCIe link_speed \"{}\", link_width {}", source_,
                                   element->Attribute("link_speed") ? element->Attribute("link_speed") : "",
                                   width < 0 ? "missing" : std::to_string(width));
  std::vector<std::string> assumed;
  if (width <= 0) {
    width = 16;
    ++unknown_width_;
    assumed.push_back("x16 assumed");
  }
  double speed = gts.value_or(0);
  if (!gts) {
    speed = fastest_gts_ > 0 ? fastest_gts_ : 8;
    ++unknown_speed_;
    assumed.push_back(fmt::format("{:g} GT/s assumed", speed));
  }
  if (!assumed.empty()) source = fmt::format("[I] {} ({})", source.substr(4), fmt::join(assumed, ", "));
  return {pcie_GBps(speed, static_cast<int>(width)), source};
}

ImportedNode XmlReader::read(const std::string& text) {
  tinyxml2::XMLDocument doc;
  if (doc.Parse(text.data(), text.size()) != tinyxml2::XML_SUCCESS)
    throw InputError(source_, doc.ErrorLineNum(), fmt::format("invalid XML: {}", doc.ErrorStr()));
  const XMLElement* system = doc.RootElement();
  if (!system || std::string(system->Name()) != "system")
    fail(system, fmt::format("expected the root element <system> of an NCCL topology file, found <{}>",
                             system ? system->Name() : ""));
  // Link speeds the file gives, for the links whose speed is empty.
  std::vector<const XMLElement*> stack{system};
  while (!stack.empty()) {
    const XMLElement* e = stack.back();
    stack.pop_back();
    if (std::string(e->Name()) == "pci") fastest_gts_ = std::max(fastest_gts_, link_speed_gts(e).value_or(0));
    for (const XMLElement* c = e->FirstChildElement(); c; c = c->NextSiblingElement())
      stack.push_back(c);
  }
  const XMLElement* first_cpu = system->FirstChildElement("cpu");
  if (!first_cpu) fail(system, "<system> holds no <cpu> element (expected one per NUMA domain)");
  node_.cpus = 0;
  for (const XMLElement* cpu = system->FirstChildElement(); cpu; cpu = cpu->NextSiblingElement()) {
    if (std::string(cpu->Name()) != "cpu")
      fail(cpu, fmt::format("expected <cpu> under <system>, found {}", describe(cpu)));
    read_cpu(cpu);
  }
  if (node_.gpus.empty()) fail(system, "the file lists no GPU (a <pci> of class 0x0302xx or a <gpu> element)");
  order_by_dev();
  resolve_gpu_model();
  resolve_nvlinks();
  resolve_cpu_link(first_cpu);
  keep_fastest_nics();
  if (unknown_width_ > 0)
    node_.assumptions.push_back(fmt::format("{} PCIe link{} with link_width 0 or none: assumed x16, as NCCL does",
                                            unknown_width_, unknown_width_ == 1 ? "" : "s"));
  if (unknown_speed_ > 0)
    node_.assumptions.push_back(
        fmt::format("{} PCIe link{} without link_speed: assumed {}", unknown_speed_, unknown_speed_ == 1 ? "" : "s",
                    fastest_gts_ > 0 ? fmt::format("{:g} GT/s, the fastest in the file", fastest_gts_)
                                     : std::string("8 GT/s (Gen3), NCCL's fallback")));
  for (const std::string& ignored : ignored_)
    node_.assumptions.push_back(ignored);
  return std::move(node_);
}

void XmlReader::read_cpu(const XMLElement* cpu) {
  const int index = node_.cpus++;
  for (const XMLElement* child = cpu->FirstChildElement(); child; child = child->NextSiblingElement()) {
    const std::string name = child->Name();
    if (name == "pci")
      read_pci(child, index, -1);
    else if (name == "nic")
      read_nics(child, nullptr, index, -1);
    else
      ignored_.push_back(fmt::format("line {}: {} under <cpu> ignored", child->GetLineNum(), describe(child)));
  }
}

void XmlReader::read_pci(const XMLElement* pci, int cpu, int parent_switch) {
  required(pci, "busid", "a PCI bus id such as 0000:17:00.0");
  const int cls = pci_class(pci);
  const int base = cls >> 8;  // class and subclass, without the programming interface
  if (base == 0x0604) {
    ImportedSwitch sw;
    sw.cpu = cpu;
    sw.parent = parent_switch;
    sw.uplink_GBps = link_rate(pci);
    sw.label = describe(pci);
    node_.switches.push_back(sw);
    const int self = static_cast<int>(node_.switches.size()) - 1;
    for (const XMLElement* child = pci->FirstChildElement(); child; child = child->NextSiblingElement()) {
      const std::string name = child->Name();
      if (name == "pci")
        read_pci(child, cpu, self);
      else if (name == "nic")
        read_nics(child, pci, cpu, self);
      else
        ignored_.push_back(
            fmt::format("line {}: {} under a PCIe switch ignored", child->GetLineNum(), describe(child)));
    }
  } else if (base == 0x0302 || base == 0x0300 || (cls >> 16) == 0x12) {
    read_gpu(pci, cpu, parent_switch);
  } else if (base == 0x0207 || base == 0x0200) {
    const XMLElement* nic = pci->FirstChildElement("nic");
    if (nic) {
      read_nics(nic, pci, cpu, parent_switch);
    } else {
      ImportedNic entry;
      entry.at = {cpu, parent_switch, link_rate(pci)};
      entry.label = describe(pci) + fmt::format(" at line {}", pci->GetLineNum());
      node_.nics.push_back(entry);
      raw_nics_.push_back({});
    }
  } else if (base == 0x0680) {
    ignored_.push_back(fmt::format("line {}: NVSwitch {} modelled through the GPUs' <nvlink> edges", pci->GetLineNum(),
                                   describe(pci)));
  } else {
    ignored_.push_back(fmt::format("line {}: {} of class 0x{:06x} ignored", pci->GetLineNum(), describe(pci), cls));
  }
}

void XmlReader::read_gpu(const XMLElement* pci, int cpu, int parent_switch) {
  RawGpu raw;
  raw.busid = pci->Attribute("busid");
  std::transform(raw.busid.begin(), raw.busid.end(), raw.busid.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  raw.line = pci->GetLineNum();
  if (const char* device = pci->Attribute("device")) raw.device_id = device;
  ImportedGpu gpu;
  gpu.at = {cpu, parent_switch, link_rate(pci)};
  gpu.label = describe(pci);
  if (const XMLElement* g = pci->FirstChildElement("gpu")) {
    raw.dev = static_cast<int>(integer(g, "dev", "the CUDA device index", false));
    const bool need_sm = options_.gpu.empty() || g->FirstChildElement("nvlink");
    raw.sm = static_cast<int>(integer(g, "sm", "the compute capability times ten, such as 90", need_sm));
    for (const XMLElement* link = g->FirstChildElement("nvlink"); link; link = link->NextSiblingElement("nvlink")) {
      RawGpu::Edge edge;
      edge.target = required(link, "target", "the PCI bus id of the peer GPU, NVSwitch or CPU");
      std::transform(edge.target.begin(), edge.target.end(), edge.target.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      edge.tclass = static_cast<int>(integer(link, "tclass", "the peer's PCI class such as 0x068000", true));
      edge.count = static_cast<int>(integer(link, "count", "the number of NVLinks, at least 1", true));
      edge.line = link->GetLineNum();
      if (edge.count < 1) fail(link, fmt::format("{} attribute 'count': expected at least 1, found 0", describe(link)));
      raw.nvlinks.push_back(edge);
    }
  }
  node_.gpus.push_back(gpu);
  raw_gpus_.push_back(raw);
}

void XmlReader::read_nics(const XMLElement* holder, const XMLElement* pci, int cpu, int parent_switch) {
  const XMLElement* first = holder->FirstChildElement("net");
  if (!first) fail(holder, fmt::format("{} holds no <net> element (expected one per port)", describe(holder)));
  int ports = 0;
  for (const XMLElement* net = first; net; net = net->NextSiblingElement("net")) {
    required(net, "name", "the device name such as mlx5_0");
    const long speed = integer(net, "speed", "the port speed in Mbit/s such as 400000", true);
    if (speed == 0)
      fail(net, fmt::format("{} attribute 'speed': expected a positive rate in Mbit/s, found 0", describe(net)));
    ImportedNic nic;
    nic.label = describe(net);
    nic.rate_Gbps = {speed / 1000.0, fmt::format("[C] {} line {}: <net name=\"{}\" speed=\"{}\"> (Mbit/s)", source_,
                                                 net->GetLineNum(), net->Attribute("name"), speed)};
    if (pci) {
      nic.at = {cpu, parent_switch, link_rate(pci)};
    } else {
      // A <nic> straight under <cpu> has no PCIe link in the file: give it one at its own rate.
      nic.at = {cpu,
                -1,
                {nic.rate_Gbps.value / 8, fmt::format("[I] {} line {}: a <nic> not behind a <pci> element: a link at "
                                                      "the port's own rate assumed",
                                                      source_, net->GetLineNum())}};
    }
    node_.nics.push_back(nic);
    raw_nics_.push_back({static_cast<int>(integer(net, "dev", "the network device index", false))});
    ++ports;
  }
  if (ports > 1 && pci)
    node_.assumptions.push_back(fmt::format("line {}: {} ports share one PCIe device; each gets its own PCIe link",
                                            holder->GetLineNum(), ports));
}

// GPUs and NICs in CUDA / network device order when every one has a `dev`, else file order.
void XmlReader::order_by_dev() {
  auto all_have_dev = [](const auto& raws) {
    return std::all_of(raws.begin(), raws.end(), [](const auto& r) { return r.dev >= 0; });
  };
  auto reorder = [](auto& items, auto& raws) {
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return raws[a].dev < raws[b].dev; });
    auto items_copy = items;
    auto raws_copy = raws;
    for (size_t i = 0; i < order.size(); ++i) {
      items[i] = items_copy[order[i]];
      raws[i] = raws_copy[order[i]];
    }
  };
  if (all_have_dev(raw_gpus_)) reorder(node_.gpus, raw_gpus_);
  if (all_have_dev(raw_nics_)) reorder(node_.nics, raw_nics_);
}

void XmlReader::resolve_gpu_model() {
  if (!options_.gpu.empty()) {
    use_preset_gpu(options_.gpu, "--gpu", node_);
    return;
  }
  // PCI device ids of the GPUs the presets describe, then the compute capability alone.
  static const std::map<std::string, std::string> by_device = {
      {"0x2330", "dgx-h100"},  {"0x2335", "hgx-h200"}, {"0x20b2", "dgx-a100"}, {"0x20b0", "dgx-a100-40g"},
      {"0x20b5", "pcie-8gpu"}, {"0x1db5", "dgx-1v"},   {"0x1db1", "summit"}};
  static const std::map<int, std::string> by_sm = {{90, "dgx-h100"}, {80, "dgx-a100"}, {70, "dgx-1v"}};
  const RawGpu& first = raw_gpus_.front();
  std::string device = first.device_id;
  std::transform(device.begin(), device.end(), device.begin(), [](unsigned char c) { return std::tolower(c); });
  if (const auto it = by_device.find(device); it != by_device.end()) {
    use_preset_gpu(it->second, fmt::format("PCI device {} at line {} of {}", device, first.line, source_), node_);
  } else if (const auto sm = by_sm.find(first.sm); sm != by_sm.end()) {
    use_preset_gpu(sm->second, fmt::format("sm {} at line {} of {}", first.sm, first.line, source_), node_);
    node_.assumptions.push_back(
        fmt::format("GPU model taken from the {} preset for sm {}{}; pass --gpu PRESET if "
                    "it differs",
                    sm->second, first.sm, device.empty() ? "" : " (PCI device " + device + ")"));
  } else {
    throw InputError(
        source_, first.line,
        fmt::format("cannot tell the GPU model from {} (sm {}, PCI device '{}'); pass --gpu with a "
                    "topology preset ({})",
                    node_.gpus.front().label, first.sm, device, fmt::join(Topology::preset_names(), ", ")));
  }
}

void XmlReader::resolve_nvlinks() {
  std::map<std::string, int> gpu_by_busid;
  for (size_t g = 0; g < raw_gpus_.size(); ++g)
    gpu_by_busid[raw_gpus_[g].busid] = static_cast<int>(g);
  const int sm = raw_gpus_.front().sm;
  const auto [per_link, rate_text] = nvlink_rate(sm);
  std::vector<int> switch_links(raw_gpus_.size(), 0);
  std::map<std::pair<int, int>, std::pair<int, int>> pairs;  // (a, b or -1-cpu) -> (links, line)
  int with_switch = 0, with_peer = 0;
  for (size_t g = 0; g < raw_gpus_.size(); ++g) {
    bool any_switch = false, any_peer = false;
    for (const RawGpu::Edge& edge : raw_gpus_[g].nvlinks) {
      const int base = edge.tclass >> 8;
      if (base == 0x0680) {
        switch_links[g] += edge.count;
        any_switch = true;
      } else if (base == 0x0302 || base == 0x0300) {
        const auto peer = gpu_by_busid.find(edge.target);
        if (peer == gpu_by_busid.end())
          throw InputError(
              source_, edge.line,
              fmt::format("<nvlink target=\"{}\">: expected the bus id of a GPU in the file, found none", edge.target));
        if (peer->second == static_cast<int>(g)) {
          node_.assumptions.push_back(fmt::format("line {}: an NVLink from GPU {} to itself ignored", edge.line, g));
          continue;
        }
        const int a = std::min<int>(static_cast<int>(g), peer->second),
                  b = std::max<int>(static_cast<int>(g), peer->second);
        auto [it, fresh] = pairs.emplace(std::make_pair(a, b), std::make_pair(edge.count, edge.line));
        if (!fresh && it->second.first != edge.count) {
          node_.assumptions.push_back(
              fmt::format("GPUs {} and {} list {} and {} NVLinks to each other (lines {} and "
                          "{}): the smaller count kept",
                          a, b, it->second.first, edge.count, it->second.second, edge.line));
          it->second.first = std::min(it->second.first, edge.count);
        }
        any_peer = true;
      } else if (base == 0x0604) {
        // NVLink to the GPU's own CPU (POWER9).
        pairs.emplace(std::make_pair(static_cast<int>(g), -1 - node_.gpus[g].at.cpu),
                      std::make_pair(edge.count, edge.line));
        any_peer = true;
      } else {
        throw InputError(source_, edge.line,
                         fmt::format("<nvlink tclass=\"0x{:06x}\">: expected the class of an NVSwitch (0x068000), a "
                                     "GPU (0x030200) or a CPU (0x060400)",
                                     edge.tclass));
      }
    }
    if (any_switch && any_peer)
      throw InputError(
          source_, raw_gpus_[g].line,
          fmt::format("GPU {} has NVLinks both to NVSwitches and to peers; the topology model gives a node "
                      "one or the other",
                      g));
    with_switch += any_switch;
    with_peer += any_peer;
  }
  if (with_switch > 0) {
    if (with_peer > 0 || with_switch != static_cast<int>(raw_gpus_.size())) {
      const int lost = static_cast<int>(std::find(switch_links.begin(), switch_links.end(), 0) - switch_links.begin());
      throw InputError(source_, raw_gpus_[lost].line,
                       fmt::format("GPU {} has no NVLink to the NVSwitches the other GPUs reach: every GPU of a node "
                                   "sits on its NVSwitch fabric (a GPU that lost its NVLinks needs fixing first)",
                                   lost));
    }
    const auto [low, high] = std::minmax_element(switch_links.begin(), switch_links.end());
    if (*low != *high)
      node_.assumptions.push_back(
          fmt::format("GPUs reach the NVSwitches over {} to {} NVLinks: every GPU given {}", *low, *high, *low));
    node_.nvlink.kind = ImportedNvlink::Kind::NvSwitch;
    node_.nvlink.switch_GBps = {*low * per_link, fmt::format("[C/S] {} line {}: {} NVLinks per GPU to the NVSwitches "
                                                             "x {}",
                                                             source_, raw_gpus_.front().line, *low, rate_text)};
  } else if (with_peer > 0) {
    node_.nvlink.kind = ImportedNvlink::Kind::Mesh;
    node_.nvlink.link_GBps = {per_link, fmt::format("[C/S] {}: NVLink counts per GPU pair; {}", source_, rate_text)};
    for (const auto& [ends, links] : pairs)
      node_.nvlink.pairs.push_back({ends.first, ends.second, links.first});
  } else if (std::all_of(raw_gpus_.begin(), raw_gpus_.end(), [](const RawGpu& r) { return r.sm == 0; })) {
    node_.assumptions.push_back(
        "the file has no <gpu> elements and so no NVLink: GPUs talk over PCIe only (an "
        "NCCL_TOPO_DUMP_FILE dump lists the NVLinks)");
  }
}

// The inter-socket rate NCCL assumes for GPU traffic, by CPU vendor and model (src/graph/topo.h).
void XmlReader::resolve_cpu_link(const XMLElement* cpu) {
  const std::string vendor = cpu->Attribute("vendor") ? cpu->Attribute("vendor") : "";
  const std::string arch = cpu->Attribute("arch") ? cpu->Attribute("arch") : "";
  const long family = integer(cpu, "familyid", "an integer CPU family", false);
  const long model = integer(cpu, "modelid", "an integer CPU model", false);
  node_.cpu_model = vendor.empty() ? arch : fmt::format("{} family {} model {}", vendor, family, model);
  double rate = 0;
  const char* name = "";
  if (vendor == "GenuineIntel") {
    if (model == 207)
      rate = 40, name = "ERP_QPI_BW (Emerald Rapids, model 207)";
    else if (model == 143)
      rate = 22, name = "SRP_QPI_BW (Sapphire Rapids, model 143)";
    else if (model >= 85)
      rate = 10, name = "SKL_QPI_BW (Skylake and later, model >= 85)";
    else
      rate = 6, name = "BDW_QPI_BW (Broadwell and earlier)";
  } else if (vendor == "AuthenticAMD") {
    if (family == 26)
      rate = 32, name = "AMD_ZEN5_BW (family 26)";
    else if (family == 25)
      rate = 24, name = "AMD_ZEN34_BW (family 25)";
    else
      rate = 16, name = "AMD_BW (Zen 1 and 2)";
  } else if (arch == "ppc64") {
    rate = 32, name = "P9_BW (POWER9)";
  } else if (arch == "arm64") {
    rate = 6, name = "ARM_BW";
  }
  if (rate > 0) {
    node_.cpu_link_GBps = {rate, fmt::format("[C] NCCL src/graph/topo.h {} = {:g} GB/s for GPU traffic between "
                                             "sockets; CPU from {} line {}",
                                             name, rate, source_, cpu->GetLineNum())};
  } else {
    node_.cpu_link_GBps = {10, "[I] unknown CPU vendor: 10 GB/s between sockets assumed (NCCL's Skylake figure)"};
    if (node_.cpus > 1) node_.assumptions.push_back("unknown CPU vendor: 10 GB/s between sockets assumed");
  }
}

// The compact form gives every NIC one rate: keep the fastest NICs (the ones NCCL picks) and say
// which were left out.
void XmlReader::keep_fastest_nics() {
  double fastest = 0;
  for (const ImportedNic& nic : node_.nics)
    fastest = std::max(fastest, nic.rate_Gbps.value);
  if (fastest <= 0) return;
  std::vector<ImportedNic> kept;
  for (const ImportedNic& nic : node_.nics) {
    if (nic.rate_Gbps.value == fastest) {
      kept.push_back(nic);
    } else {
      node_.assumptions.push_back(
          fmt::format("{} left out: {:g} Gb/s, slower than the node's {:g} Gb/s NICs (the "
                      "topology gives a node's NICs one rate)",
                      nic.label, nic.rate_Gbps.value, fastest));
    }
  }
  node_.nics = std::move(kept);
}

}  // namespace

ImportResult import_nccl_xml(const std::string& xml_text, const std::string& source, const ImportOptions& options) {
  XmlReader reader(source, options);
  return write_compact_topology(reader.read(xml_text), source, options);
}

}  // namespace wallfacer::detail

namespace wallfacer {

ImportResult import_nccl_topology_xml(const std::string& xml_text, const std::string& source,
                                      const ImportOptions& options) {
  return detail::import_nccl_xml(xml_text, source, options);
}

}  // namespace wallfacer
