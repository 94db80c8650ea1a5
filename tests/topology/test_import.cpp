// Importing NCCL topology XML and `nvidia-smi topo -m` output: public dumps and skeletons
// (tests/topology/fixtures/README.md names their sources and licences) and hand-made edge cases.
// References are the figures written in the inputs: NVLink counts x 25 GB/s, PCIe link_speed x
// link_width with the generation's line code, NIC speed in Mbit/s / 8000; and, for the DGX H100
// matrix, the dgx-h100 preset itself (the same content hash).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include <wallfacer/topology/import.hpp>
#include <wallfacer/topology/topology.hpp>
#include "common/cli_runner.hpp"

namespace wallfacer {
namespace {

const std::string kFixtures = std::string(WALLFACER_SOURCE_DIR) + "/tests/topology/fixtures/";
constexpr double kGen4x16 = 16.0 * 16 * 128 / 130 / 8;  // 31.51 GB/s
constexpr double kGen5x16 = 32.0 * 16 * 128 / 130 / 8;  // 63.02 GB/s

ImportOptions options(int nodes, std::string network = "", std::string gpu = "", double nic_Gbps = 0) {
  ImportOptions o;
  o.nodes = nodes;
  o.network = std::move(network);
  o.gpu = std::move(gpu);
  o.nic_Gbps = nic_Gbps;
  return o;
}

Topology import_xml(const std::string& fixture, const ImportOptions& opts, std::vector<std::string>* notes = nullptr) {
  const std::string path = kFixtures + "nccl/" + fixture;
  const ImportResult result = import_nccl_topology_xml(yaml::read_file(path), fixture, opts);
  if (notes) *notes = result.assumptions;
  return Topology::parse(result.yaml, fixture);
}

std::string xml_error(const std::string& xml, ImportOptions opts = ImportOptions{}) {
  try {
    (void)import_nccl_topology_xml(xml, "t.xml", opts);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

bool mentions(const std::vector<std::string>& notes, const std::string& text) {
  return std::any_of(notes.begin(), notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

int count_kind(const Topology& topo, const Route& route, DeviceKind kind) {
  return static_cast<int>(
      std::count_if(route.devices.begin(), route.devices.end(), [&](int d) { return topo.devices()[d].kind == kind; }));
}

TEST(TopologyImport, GcpA3DumpGivesNvSwitchPcieAndNicRatesOfTheXml) {
  std::vector<std::string> notes;
  const Topology topo = import_xml("xla-gcp-a3.xml", options(2, "", "", 0), &notes);
  EXPECT_EQ(topo.num_gpus(), 16);
  EXPECT_EQ(topo.gpu().name, "H100-SXM5-80GB");  // PCI device 0x2330
  // <nvlink count="18" tclass="0x068000"/> on every GPU: 18 x 25 GB/s through the NVSwitch.
  EXPECT_DOUBLE_EQ(topo.route(0, 7).bottleneck_GBps, 450);
  EXPECT_EQ(count_kind(topo, topo.route(0, 7), DeviceKind::NvSwitch), 1);
  // GPU 0 sits under switch 0000:02:00.0 with eth1 (200000 Mbit/s); the links are 16 GT/s x16.
  EXPECT_EQ(topo.devices()[topo.nic_of_gpu(0)].name, "n0/nic1");
  const Route& across = topo.route(0, 8);
  EXPECT_DOUBLE_EQ(across.bottleneck_GBps, 25);
  for (const Hop& hop : across.hops)
    if (topo.links()[hop.link].kind == LinkKind::Pcie) {
      EXPECT_NEAR(topo.links()[hop.link].bandwidth_GBps, kGen4x16, 1e-3);
    }
  // eth0..eth4 at 200 Gb/s stay; the three 10 Gb/s virtual interfaces are left out and said.
  EXPECT_EQ(std::count_if(topo.devices().begin(), topo.devices().end(),
                          [](const Device& d) { return d.kind == DeviceKind::Nic && d.node == 0; }),
            5);
  EXPECT_TRUE(mentions(notes, "cilium_net"));
  EXPECT_TRUE(mentions(notes, "link_width 0"));  // eth0's link_width="0"
}

TEST(TopologyImport, DgxA100DumpKeepsTheNestedPcieTreeAndSocketRate) {
  const Topology topo = import_xml("xla-nvidia-a100.xml", options(2, "ib-hdr", "", 0));
  EXPECT_EQ(topo.num_gpus(), 16);
  EXPECT_EQ(topo.gpu().name, "A100-SXM4-80GB");                    // PCI device 0x20b2
  EXPECT_DOUBLE_EQ(topo.route(0, 5).bottleneck_GBps, 6 * 2 * 25);  // six <nvlink count="2">
  // GPU 1 (0000:0f:00.0) hangs below 0d -> 0a, beside mlx5_0 (0c) under 0a: two switches up to
  // its NIC; the route to the other node crosses them on both sides.
  const Route& across = topo.route(1, 9);
  EXPECT_DOUBLE_EQ(across.bottleneck_GBps, 200.0 / 8);
  EXPECT_EQ(count_kind(topo, across, DeviceKind::PcieSwitch), 4);
  // Four <cpu> elements, AuthenticAMD: NCCL's AMD_BW of 16 GB/s between sockets.
  int sockets = 0;
  for (const Device& d : topo.devices())
    sockets += d.kind == DeviceKind::Cpu && d.node == 0;
  EXPECT_EQ(sockets, 4);
  for (const Link& link : topo.links())
    if (link.kind == LinkKind::CpuBus) {
      EXPECT_DOUBLE_EQ(link.bandwidth_GBps, 16);
    }
  EXPECT_EQ(topo.fabric().type, "rail_optimized");
}

TEST(TopologyImport, AzureSkeletonsNeedTheGpuModelAndSayWhatTheyAssume) {
  const std::string ndv4 = yaml::read_file(kFixtures + "nccl/azure-ndv4-topo.xml");
  EXPECT_EQ(xml_error(ndv4).rfind("t.xml:4: error: cannot tell the GPU model from <pci busid=\"0003:00:00.0\">", 0), 0u)
      << xml_error(ndv4);
  EXPECT_EQ(xml_error(ndv4, options(1, "", "dgx-a100", 0)),
            "t.xml: error: the input gives no NIC speed (<pci busid=\"0103:00:00.0\"> at line 5); pass --nic-Gbps RATE "
            "or an InfiniBand --network preset (ib-ndr, ib-hdr)");
  std::vector<std::string> notes;
  const Topology topo = import_xml("azure-ndv4-topo.xml", options(2, "ib-hdr", "dgx-a100", 0), &notes);
  // No <gpu> elements, so no NVLink: two GPUs under one Gen4 x16 switch talk over PCIe.
  EXPECT_NEAR(topo.route(0, 1).bottleneck_GBps, kGen4x16, 1e-3);
  EXPECT_NEAR(topo.route(0, 8).bottleneck_GBps, 25, 1e-9);  // HDR nominal, assumed
  EXPECT_TRUE(mentions(notes, "no <gpu> elements"));
  EXPECT_TRUE(mentions(notes, "ib-hdr"));

  const Topology ndv5 = import_xml("azure-ndv5-topo.xml", options(1, "ib-ndr", "dgx-h100", 0));
  EXPECT_NEAR(ndv5.route(0, 1).bottleneck_GBps, kGen5x16, 1e-3);  // two switches under one socket
  EXPECT_DOUBLE_EQ(ndv5.route(0, 4).bottleneck_GBps, 22);         // across sockets: SRP_QPI_BW (model 143)
}

TEST(TopologyImport, AzureNcv4SelfNvlinkIsIgnoredAndGpusCrossSockets) {
  std::vector<std::string> notes;
  const Topology topo = import_xml("azure-ncv4-topo.xml", {}, &notes);
  EXPECT_EQ(topo.gpu().name, "A100-PCIe-80GB");  // PCI device 0x20b5
  EXPECT_TRUE(mentions(notes, "to itself ignored"));
  EXPECT_EQ(count_kind(topo, topo.route(0, 1), DeviceKind::NvSwitch), 0);
  // link_speed="" link_width="0": x16 at Gen3, NCCL's fallback, below the AMD sockets' 16 GB/s.
  EXPECT_NEAR(topo.route(0, 1).bottleneck_GBps, 8.0 * 16 * 128 / 130 / 8, 1e-3);
}

// A small dump to edit: one socket, one Gen5 switch with GPUs 0 and 1 and one NDR NIC.
const std::string kDump = R"(<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:10:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:11:00.0" class="0x030200" device="0x2330" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1">
          <nvlink target="0000:12:00.0" count="4" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:12:00.0" class="0x030200" device="0x2330" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="1" sm="90" rank="1" gdr="1">
          <nvlink target="0000:11:00.0" count="4" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:13:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>
</system>
)";

std::string edit(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

Topology import_text(const std::string& xml, ImportOptions opts = ImportOptions{}) {
  return Topology::parse(import_nccl_topology_xml(xml, "t.xml", opts).yaml, "t.yaml");
}

TEST(TopologyImport, PointToPointNvlinksBecomeAMesh) {
  const Topology topo = import_text(kDump, options(2, "", "", 0));
  EXPECT_DOUBLE_EQ(topo.route(0, 1).bottleneck_GBps, 4 * 25);
  EXPECT_NEAR(topo.route(0, 2).bottleneck_GBps, 50, 1e-9);  // 400000 Mbit/s
  EXPECT_NEAR(topo.links()[topo.route(0, 2).hops.front().link].bandwidth_GBps, kGen5x16, 1e-3);
}

TEST(TopologyImport, GpusWithoutNvlinkTalkOverTheirSwitch) {
  std::string xml = edit(kDump, "          <nvlink target=\"0000:12:00.0\" count=\"4\" tclass=\"0x030200\"/>\n", "");
  xml = edit(xml, "          <nvlink target=\"0000:11:00.0\" count=\"4\" tclass=\"0x030200\"/>\n", "");
  xml = edit(xml,
             "<pci busid=\"0000:12:00.0\" class=\"0x030200\" device=\"0x2330\" link_speed=\"32.0 GT/s PCIe\" "
             "link_width=\"16\">",
             "<pci busid=\"0000:12:00.0\" class=\"0x030200\" device=\"0x2330\" link_speed=\"16.0 GT/s PCIe\" "
             "link_width=\"8\">");
  const Topology topo = import_text(xml);
  EXPECT_NEAR(topo.route(0, 1).bottleneck_GBps, 16.0 * 8 * 128 / 130 / 8, 1e-3);  // GPU 1's Gen4 x8 link
  EXPECT_EQ(count_kind(topo, topo.route(0, 1), DeviceKind::PcieSwitch), 1);
}

TEST(TopologyImport, TwoNicsPerGpu) {
  const std::string second =
      R"(      <pci busid="0000:14:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_1" dev="1" speed="400000" port="1" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>)";
  const std::string xml = edit(kDump, "    </pci>\n  </cpu>", second);
  const Topology topo = import_text(xml, options(2, "ib-ndr", "", 0));
  EXPECT_EQ(topo.num_gpus(), 4);
  EXPECT_EQ(std::count_if(topo.devices().begin(), topo.devices().end(),
                          [](const Device& d) { return d.kind == DeviceKind::Nic; }),
            4);
  EXPECT_NE(topo.nic_of_gpu(0), topo.nic_of_gpu(1));  // each GPU takes one of its switch's NICs
  EXPECT_NEAR(topo.route(0, 2).bottleneck_GBps, 50, 1e-9);
}

TEST(TopologyImport, BadInputNamesTheLineTheElementAndWhatWasExpected) {
  EXPECT_EQ(xml_error(edit(kDump, " speed=\"400000\"", "")),
            "t.xml:16: error: <net name=\"mlx5_0\" dev=\"0\"> lacks attribute 'speed' (expected the port speed in "
            "Mbit/s such as 400000)");
  EXPECT_EQ(xml_error(edit(kDump, "speed=\"400000\"", "speed=\"fast\"")),
            "t.xml:16: error: <net name=\"mlx5_0\" dev=\"0\"> attribute 'speed': expected the port speed in Mbit/s "
            "such as 400000, found \"fast\"");
  EXPECT_EQ(xml_error(edit(kDump, "class=\"0x020700\" ", "")),
            "t.xml:14: error: <pci busid=\"0000:13:00.0\"> lacks attribute 'class' (expected a PCI class code such as "
            "0x060400)");
  EXPECT_EQ(xml_error(edit(kDump, "link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n      <pci busid=\"0000:11",
                           "link_speed=\"fast\" link_width=\"16\">\n      <pci busid=\"0000:11")),
            "t.xml:3: error: <pci busid=\"0000:10:00.0\"> attribute 'link_speed': expected a PCIe rate such as \"16.0 "
            "GT/s PCIe\" (2.5, 5, 8, 16, 32 or 64 GT/s), found \"fast\"");
  EXPECT_EQ(xml_error(edit(kDump, "target=\"0000:12:00.0\"", "target=\"0000:99:00.0\"")),
            "t.xml:6: error: <nvlink target=\"0000:99:00.0\">: expected the bus id of a GPU in the file, found none");
  EXPECT_EQ(xml_error(edit(kDump, "</nic>", "")).rfind("t.xml:", 0), 0u);
  EXPECT_NE(xml_error(edit(kDump, "</nic>", "")).find("invalid XML"), std::string::npos);
  EXPECT_EQ(xml_error("<system version=\"1\"/>"),
            "t.xml:1: error: <system> holds no <cpu> element (expected one per NUMA domain)");
  EXPECT_EQ(xml_error("<graphs/>"),
            "t.xml:1: error: expected the root element <system> of an NCCL topology file, found <graphs>");
  EXPECT_EQ(
      xml_error(kDump, options(1, "ib-qdr", "", 0)).rfind("--network: error: 'ib-qdr' is neither a network preset", 0),
      0u);
}

TEST(TopologyImport, AGpuThatLostItsNvlinksIsAnError) {
  const std::string two = R"(<system version="1"><cpu numaid="0" vendor="GenuineIntel" familyid="6" modelid="143">
<pci busid="0000:11:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="90">
<nvlink target="fffffff:ff:ff.0" count="18" tclass="0x068000"/></gpu></pci>
<pci busid="0000:12:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"><gpu dev="1" sm="90"/></pci>
</cpu></system>)";
  EXPECT_EQ(xml_error(two),
            "t.xml:4: error: GPU 1 has no NVLink to the NVSwitches the other GPUs reach: every GPU of a "
            "node sits on its NVSwitch fabric (a GPU that lost its NVLinks needs fixing first)");
}

// ---- nvidia-smi topo -m -------------------------------------------------------------------------

std::string smi_error(const std::string& text, ImportOptions opts = options(1, "", "dgx-h100", 0)) {
  try {
    (void)import_nvidia_smi_topology(text, "m.txt", opts);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TopologyImport, NvidiaSmiMatrixOfAnHgxH100RebuildsTheDgxH100Preset) {
  const std::string text = yaml::read_file(kFixtures + "nvidia-smi/hgx-h100-8gpu-8nic.txt");
  const ImportResult result = import_nvidia_smi_topology(text, "m.txt", options(4, "ib-ndr", "dgx-h100", 0));
  const Topology imported = Topology::parse(result.yaml, "m.yaml");
  // NV18 everywhere, GPU i and NIC i on one switch (PIX), sockets split by SYS, NDR rails: the
  // same devices and links as the hand-written preset.
  EXPECT_EQ(imported.content_hash(), Topology::load("dgx-h100", 4).content_hash());
  EXPECT_TRUE(mentions(result.assumptions, "PCIe layout rebuilt"));
  EXPECT_EQ(smi_error(text, options(1)).rfind("m.txt: error: the matrix does not name the GPU model: pass --gpu", 0),
            0u);
}

TEST(TopologyImport, NvidiaSmiMeshPxbAndErrors) {
  const std::string mesh =
      "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\n"
      "GPU0\t X \tNV4\tNV4\tNV4\tPXB\n"
      "GPU1\tNV4\t X \tNV4\tNV4\tPXB\n"
      "GPU2\tNV4\tNV4\t X \tNV4\tSYS\n"
      "GPU3\tNV4\tNV4\tNV4\t X \tSYS\n"
      "NIC0\tPXB\tPXB\tSYS\tSYS\t X \n";
  const Topology topo =
      Topology::parse(import_nvidia_smi_topology(mesh, "m.txt", options(1, "", "dgx-a100", 200)).yaml, "m.yaml");
  EXPECT_DOUBLE_EQ(topo.route(0, 3).bottleneck_GBps, 4 * 25);  // 3 x 4 links fit a GPU: a mesh
  EXPECT_EQ(count_kind(topo, topo.route(0, 3), DeviceKind::NvSwitch), 0);
  // GPU 0, GPU 1 and NIC 0 are PXB: separate switches below a common one.
  int switches = 0;
  for (const Device& d : topo.devices())
    switches += d.kind == DeviceKind::PcieSwitch;
  EXPECT_EQ(switches, 4);

  EXPECT_EQ(smi_error(edit(mesh, "GPU1\tNV4\t X \tNV4", "GPU1\tNV4\t X \tNV5")),
            "m.txt:4: error: row GPU2, column GPU1 differs from row GPU1, column GPU2: the matrix must be symmetric");
  EXPECT_EQ(smi_error(edit(mesh, "GPU2\tNV4\tNV4\t X \tNV4\tSYS", "GPU2\tNV4\tNV4\t X \tNV4\tFAR")),
            "m.txt:4: error: row GPU2, column NIC0: expected X, NV<count>, PIX, PXB, PHB, NODE or SYS, found 'FAR'");
  EXPECT_EQ(smi_error(edit(mesh, "NIC0\tPXB\tPXB\tSYS\tSYS\t X \n", "")),
            "m.txt:5: error: expected 5 rows, one per column of the header at line 1, found 4");
  EXPECT_EQ(smi_error("no matrix here\n"),
            "m.txt: error: expected the header row of `nvidia-smi topo -m` (GPU0 GPU1 ... NIC0 ...), found none");
  // Found by fuzzing (tests/fuzz/corpus/fuzz_nvidia_smi/nv-count-overflow.txt): a link count
  // past what an int holds ended in an uncaught std::out_of_range from std::stoi.
  EXPECT_EQ(smi_error(edit(mesh, "GPU0\t X \tNV4\t", "GPU0\t X \tNV88888888888888888888888818\t")),
            "m.txt:2: error: row GPU0, column GPU1: 'NV88888888888888888888888818' claims more than 1024 NVLinks "
            "between two GPUs");
  EXPECT_EQ(smi_error(edit(mesh, "GPU0\t X \tNV4\t", "GPU0\t X \tNV1025\t")),
            "m.txt:2: error: row GPU0, column GPU1: 'NV1025' claims more than 1024 NVLinks between two GPUs");
}

// ---- the minimal form and the command line --------------------------------------------------------

TEST(TopologyImport, MinimalFormWithoutPcieIsAcceptedWithItsAssumption) {
  const std::string text = R"(name: minimal
gpu: {model: H100, peak_bf16_tflops: 989, peak_fp16_tflops: 989, peak_fp8_tflops: 1979, memory_GiB: 80, hbm_GBps: 3350}
nodes: 2
node:
  gpus: 8
  cpus: {count: 2, link: {bandwidth_GBps: 10, latency_us: 0.5}}
  gpu_fabric: {type: nvswitch, bandwidth_GBps: 450, latency_us: 0.3}
  nics: {count: 8, rate_Gbps: 400}
network: {type: single_switch, link_latency_us: 0.35}
)";
  // The assumption is a warning once per file, however often it is read (a search's suggestions
  // read it again at other node counts); it stays in every topology's assumptions().
  testing::internal::CaptureStderr();
  const Topology topo = Topology::parse(text, "warned-once.yaml");
  const Topology again = Topology::parse(text, "warned-once.yaml", 4);
  const std::string warned = testing::internal::GetCapturedStderr();
  const std::string warning = "warned-once.yaml: no 'pcie' section";
  EXPECT_NE(warned.find(warning), std::string::npos) << warned;
  EXPECT_EQ(warned.find(warning), warned.rfind(warning)) << warned;
  EXPECT_EQ(again.assumptions(), topo.assumptions());
  ASSERT_EQ(topo.assumptions().size(), 1u);
  EXPECT_NE(topo.assumptions()[0].find("8 PCIe switches (1 GPU and 1 NIC each) under 2 CPU sockets"), std::string::npos)
      << topo.assumptions()[0];
  EXPECT_DOUBLE_EQ(topo.route(0, 8).bottleneck_GBps, 50);
  EXPECT_NE(topo.nic_of_gpu(0), topo.nic_of_gpu(1));
  for (const Link& link : topo.links())
    if (link.kind == LinkKind::Pcie) {
      EXPECT_DOUBLE_EQ(link.bandwidth_GBps, 63);
    }
  EXPECT_TRUE(Topology::load("dgx-h100").assumptions().empty());
}

TEST(TopologyImport, CommandWritesAFileThatPlans) {
  ASSERT_TRUE(test::cli_present());
  const std::string out = testing::TempDir() + "imported_a3.yaml";
  const test::CliResult imported =
      test::run_cli("topo import " + kFixtures + "nccl/xla-gcp-a3.xml --nodes 2 -o " + out, "2>&1");
  ASSERT_EQ(imported.status, 0) << imported.output;
  EXPECT_NE(imported.output.find("note: "), std::string::npos);
  EXPECT_NE(imported.output.find("(16 GPUs in 2 nodes) to " + out), std::string::npos);
  const test::CliResult plan =
      test::run_cli("plan --topology " + out + " --gpus 16 --seq 16384 --top 1 --scope attention", "2>&1");
  EXPECT_EQ(plan.status, 0) << plan.output;
  EXPECT_NE(plan.output.find("on xla-gcp-a3 (2 nodes, 16 GPUs used)"), std::string::npos) << plan.output;
  const test::CliResult bad = test::run_cli("topo import " + kFixtures + "nccl/azure-ndv4-topo.xml", "2>&1");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("pass --gpu"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace wallfacer
