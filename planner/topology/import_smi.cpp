// Reads the matrix `nvidia-smi topo -m` prints: a header row of GPU<i> and NIC<j> columns (then
// CPU Affinity, NUMA Affinity, GPU NUMA ID), one row per device with X on the diagonal and
// NV<k>, PIX, PXB, PHB, NODE or SYS between devices, then the legend and the NIC legend
// (NIC0: mlx5_0). The matrix gives relations, not rates: NVLink counts are exact; the PCIe tree
// is rebuilt from the relations (PIX: one switch, PXB: switches joined below the host bridge,
// NODE/PHB: the same socket, SYS: another socket) and its rates, the NIC speed and the GPU model
// come from options and presets, each said in the result.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include <wallfacer/core/errors.hpp>
#include "import_model.hpp"
#include "topology_impl.hpp"

namespace wallfacer::detail {
namespace {

enum class Relation { Self, NvLink, Pix, Pxb, Phb, Node, Sys };

struct Matrix {
  std::vector<std::string> names;  // GPU0.., NIC0..
  std::vector<std::vector<Relation>> relation;
  std::vector<std::vector<int>> nvlinks;  // NV<k> counts
  std::vector<int> line;                  // line of each row
  std::map<std::string, std::string> nic_names;
};

std::vector<std::string> split_columns(const std::string& line) {
  // Columns are separated by tabs (or runs of two or more spaces); "CPU Affinity" holds one space.
  std::string text = line;
  std::replace(text.begin(), text.end(), '\t', '\n');
  for (size_t at = text.find("  "); at != std::string::npos; at = text.find("  ", at))
    text.replace(at, 2, "\n");
  std::vector<std::string> out;
  std::istringstream cells(text);
  for (std::string cell; std::getline(cells, cell, '\n');) {
    cell.erase(0, cell.find_first_not_of(' '));
    cell.erase(cell.find_last_not_of(' ') + 1);
    if (!cell.empty()) out.push_back(cell);
  }
  return out;
}

bool is_device(const std::string& name) {
  return (name.rfind("GPU", 0) == 0 || name.rfind("NIC", 0) == 0 || name.rfind("mlx", 0) == 0) && name.size() > 3;
}

Relation parse_relation(const std::string& source, int line, const std::string& row, const std::string& column,
                        const std::string& cell, int& links) {
  links = 0;
  if (cell == "X") return Relation::Self;
  if (cell == "PIX") return Relation::Pix;
  if (cell == "PXB") return Relation::Pxb;
  if (cell == "PHB") return Relation::Phb;
  if (cell == "NODE") return Relation::Node;
  if (cell == "SYS" || cell == "SOC") return Relation::Sys;
  if (cell.size() > 2 && cell.rfind("NV", 0) == 0 &&
      std::all_of(cell.begin() + 2, cell.end(), [](unsigned char c) { return std::isdigit(c); })) {
    // Read digit by digit up to the limit, so that a long run of digits is a clear error, never an
    // out-of-range exception.
    for (auto c = cell.begin() + 2; c != cell.end() && links <= kMaxParallelLinks; ++c)
      links = links * 10 + (*c - '0');
    if (links > kMaxParallelLinks)
      throw InputError(source, line,
                       fmt::format("row {}, column {}: '{}' claims more than {} NVLinks between two GPUs", row, column,
                                   cell, kMaxParallelLinks));
    if (links > 0) return Relation::NvLink;
  }
  throw InputError(source, line,
                   fmt::format("row {}, column {}: expected X, NV<count>, PIX, PXB, PHB, NODE or SYS, found '{}'", row,
                               column, cell));
}

Matrix read_matrix(const std::string& text, const std::string& source) {
  Matrix m;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  int header_line = 0;
  size_t devices = 0;
  std::vector<std::string> header;
  while (std::getline(in, raw)) {
    ++line_no;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::vector<std::string> cells = split_columns(raw);
    if (cells.empty()) continue;
    if (header_line == 0) {
      if (!is_device(cells.front())) continue;
      header = cells;
      header_line = line_no;
      while (devices < header.size() && is_device(header[devices]))
        ++devices;
      m.names.assign(header.begin(), header.begin() + static_cast<std::ptrdiff_t>(devices));
      continue;
    }
    // NIC legend: "  NIC0: mlx5_0".
    if (cells.size() == 2 && cells[0].back() == ':' && is_device(cells[0].substr(0, cells[0].size() - 1))) {
      m.nic_names[cells[0].substr(0, cells[0].size() - 1)] = cells[1];
      continue;
    }
    if (m.relation.size() == devices) continue;  // the legend
    if (cells.front() != m.names[m.relation.size()]) {
      if (m.relation.empty() || cells.front().rfind("Legend", 0) == 0)
        throw InputError(source, line_no,
                         fmt::format("expected the row of {} (rows follow the header's columns), found '{}'",
                                     m.names[m.relation.size()], cells.front()));
      throw InputError(source, line_no,
                       fmt::format("expected the row of {}, found '{}'", m.names[m.relation.size()], cells.front()));
    }
    if (cells.size() < devices + 1)
      throw InputError(
          source, line_no,
          fmt::format("row {}: expected {} relation columns, found {}", cells.front(), devices, cells.size() - 1));
    std::vector<Relation> row(devices);
    std::vector<int> counts(devices);
    for (size_t c = 0; c < devices; ++c)
      row[c] = parse_relation(source, line_no, cells.front(), m.names[c], cells[c + 1], counts[c]);
    m.relation.push_back(row);
    m.nvlinks.push_back(counts);
    m.line.push_back(line_no);
  }
  if (header_line == 0)
    throw InputError(source, 0, "expected the header row of `nvidia-smi topo -m` (GPU0 GPU1 ... NIC0 ...), found none");
  if (m.relation.size() != devices)
    throw InputError(source, line_no,
                     fmt::format("expected {} rows, one per column of the header at line {}, found {}", devices,
                                 header_line, m.relation.size()));
  for (size_t a = 0; a < devices; ++a) {
    if (m.relation[a][a] != Relation::Self)
      throw InputError(source, m.line[a], fmt::format("row {}: expected X on the diagonal", m.names[a]));
    for (size_t b = 0; b < a; ++b)
      if (m.relation[a][b] != m.relation[b][a] || m.nvlinks[a][b] != m.nvlinks[b][a])
        throw InputError(source, m.line[a],
                         fmt::format("row {}, column {} differs from row {}, column {}: the matrix must be symmetric",
                                     m.names[a], m.names[b], m.names[b], m.names[a]));
  }
  return m;
}

// Union-find over devices.
struct Groups {
  std::vector<int> parent;
  explicit Groups(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

// PCIe rate assumed for every link: the --gpu preset's fastest PCIe link.
Sourced preset_pcie_rate(const std::string& preset) {
  const Topology topology = Topology::load(preset);
  double best = 0;
  for (const Link& link : topology.links())
    if (link.kind == LinkKind::Pcie) best = std::max(best, link.bandwidth_GBps);
  if (best <= 0) best = 31.5;
  return {best, fmt::format("[I] the matrix gives no PCIe rates: {:g} GB/s, the {} preset's PCIe links", best, preset)};
}

ImportedNode build_node(const Matrix& m, const std::string& source, const ImportOptions& options) {
  ImportedNode node;
  node.input_label = "`nvidia-smi topo -m` output " + source;
  if (options.gpu.empty())
    throw InputError(source, 0,
                     fmt::format("the matrix does not name the GPU model: pass --gpu with a topology preset ({})",
                                 fmt::join(Topology::preset_names(), ", ")));
  use_preset_gpu(options.gpu, "--gpu", node);
  const Sourced pcie = preset_pcie_rate(options.gpu);
  const int n = static_cast<int>(m.names.size());
  std::vector<int> gpu_rows, nic_rows;
  for (int i = 0; i < n; ++i)
    (m.names[i][0] == 'G' ? gpu_rows : nic_rows).push_back(i);
  if (gpu_rows.empty()) throw InputError(source, m.line.front(), "the matrix has no GPU rows");

  // Sockets: the groups of devices joined by PCIe relations other than SYS.
  Groups socket(n);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (m.relation[a][b] != Relation::Sys && m.relation[a][b] != Relation::NvLink) socket.join(a, b);
  std::map<int, int> socket_index;
  std::vector<int> cpu_of(n);
  for (int i = 0; i < n; ++i) {
    const int root = socket.find(i);
    const auto [it, fresh] = socket_index.emplace(root, static_cast<int>(socket_index.size()));
    cpu_of[i] = it->second;
  }
  node.cpus = static_cast<int>(socket_index.size());
  node.cpu_model = "";
  node.cpu_link_GBps = {10, "[I] the matrix gives no inter-socket rate: 10 GB/s, NCCL's SKL_QPI_BW (src/graph/topo.h)"};
  if (node.cpus > 1) node.assumptions.push_back("10 GB/s between sockets assumed (NCCL's Skylake figure)");

  // Switches: devices joined by PIX share one; groups joined by PXB hang from a common switch.
  Groups pix(n), pxb(n);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (m.relation[a][b] == Relation::Pix) pix.join(a, b);
      if (m.relation[a][b] == Relation::Pix || m.relation[a][b] == Relation::Pxb) pxb.join(a, b);
    }
  std::map<int, int> upper_switch, lower_switch;  // pxb root / pix root -> switch index
  auto group_size = [&](Groups& g, int i) {
    int count = 0;
    for (int j = 0; j < n; ++j)
      count += g.find(j) == g.find(i);
    return count;
  };
  std::vector<int> switch_of(n, -1);
  for (int i = 0; i < n; ++i) {
    if (group_size(pxb, i) == 1) continue;  // alone: on a root port
    int parent = -1;
    const bool nested = group_size(pxb, i) > group_size(pix, i);
    if (nested) {
      const auto [it, fresh] = upper_switch.emplace(pxb.find(i), static_cast<int>(node.switches.size()));
      if (fresh) node.switches.push_back({cpu_of[i], -1, pcie, fmt::format("switch above {}", m.names[i])});
      parent = it->second;
    }
    const auto [it, fresh] = lower_switch.emplace(pix.find(i), static_cast<int>(node.switches.size()));
    if (fresh) node.switches.push_back({cpu_of[i], parent, pcie, fmt::format("switch of {}", m.names[i])});
    switch_of[i] = it->second;
  }
  for (int row : gpu_rows)
    node.gpus.push_back({{cpu_of[row], switch_of[row], pcie}, m.names[row]});
  for (int row : nic_rows) {
    const auto legend = m.nic_names.find(m.names[row]);
    ImportedNic nic;
    nic.at = {cpu_of[row], switch_of[row], pcie};
    nic.label = legend == m.nic_names.end() ? m.names[row] : fmt::format("{} ({})", m.names[row], legend->second);
    node.nics.push_back(nic);
  }
  node.assumptions.push_back(
      fmt::format("PCIe layout rebuilt from the matrix's relations: {} switch{}, every link {:g} "
                  "GB/s, the {} preset's PCIe rate",
                  node.switches.size(), node.switches.size() == 1 ? "" : "es", pcie.value, options.gpu));

  // NVLink: every pair NV<k> alike with more links than a GPU has for point-to-point peers
  // (at most 18) means an NVSwitch; otherwise point-to-point links.
  std::map<int, int> counts;
  bool all_pairs = true;
  for (size_t a = 0; a < gpu_rows.size(); ++a)
    for (size_t b = a + 1; b < gpu_rows.size(); ++b) {
      const int links = m.nvlinks[gpu_rows[a]][gpu_rows[b]];
      if (links > 0)
        ++counts[links];
      else
        all_pairs = false;
    }
  const int g = static_cast<int>(gpu_rows.size());
  const double per_link = 25;  // NVLink 2-4, nominal
  if (all_pairs && counts.size() == 1 && g > 2 && (g - 1) * counts.begin()->first > 18) {
    const int links = counts.begin()->first;
    node.nvlink.kind = ImportedNvlink::Kind::NvSwitch;
    node.nvlink.switch_GBps = {links * per_link,
                               fmt::format("[C/I] {}: NV{} between every GPU pair, more links than a GPU has for "
                                           "direct peers, so an NVSwitch fabric; x 25 GB/s per link (NVLink 2-4)",
                                           source, links)};
  } else if (!counts.empty()) {
    node.nvlink.kind = ImportedNvlink::Kind::Mesh;
    node.nvlink.link_GBps = {per_link,
                             fmt::format("[C/I] {}: NV<count> per GPU pair x 25 GB/s per link (NVLink 2-4)", source)};
    for (int a = 0; a < g; ++a)
      for (int b = a + 1; b < g; ++b)
        if (const int links = m.nvlinks[gpu_rows[a]][gpu_rows[b]]; links > 0)
          node.nvlink.pairs.push_back({a, b, links});
  }
  return node;
}

}  // namespace
}  // namespace wallfacer::detail

namespace wallfacer {

ImportResult import_nvidia_smi_topology(const std::string& text, const std::string& source,
                                        const ImportOptions& options) {
  const detail::Matrix matrix = detail::read_matrix(text, source);
  return detail::write_compact_topology(detail::build_node(matrix, source, options), source, options);
}

}  // namespace wallfacer
