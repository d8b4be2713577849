// Keys that several topology generators share (name and provenance, a server's NVLink/PCIe
// and prices) and the checked list reader they use. Each generator is its own file in this
// folder and registers itself (SLUICE_REGISTER); the loader is network/catalog.cpp.
#pragma once
#include <string>
#include <vector>

#include "config/binding.h"
#include "network/generators.h"

namespace sluice::net {

// name, description, source: read by the loader (name) and the docs, not by a builder.
void add_common_topology_keys(Schema& s);
// A server's keys, bound to a ServerSpec (host CPUs default to `host_cpus_default`).
Binding<ServerSpec> server_keys(Schema& s, const std::string& host_cpus_default);
// What a bound ServerSpec must also satisfy (at most one host CPU per GPU).
void check_server(const Params& p, const ServerSpec& s);
// The Clos that joins servers (or racks) by a NIC per GPU, for generators whose servers are
// their own kind (NVL72 racks, xGMI meshes).
struct ScaleOut {
  bool rail_optimized = true;
  double nic_Bps = 50e9;
  int switch_radix = 64, tiers = 2;
  int64_t link_latency_ns = 500;
  double switch_usd = 0, nic_usd = 0, cable_usd = 0;
};
// Its keys: scale_out (rail-optimized or fat-tree), nic_bandwidth, switch_radix (default and
// doc given), tiers, link_latency and the switch, NIC and cable prices.
Binding<ScaleOut> scale_out_keys(Schema& s, const std::string& radix_default, const std::string& radix_doc);
// `servers` copies of `server` joined by the scale-out Clos (one server alone: no scale-out),
// its family named.
Topology build_scaled_out(const ServerSpec& server, int servers, const ScaleOut& so, const std::string& name, const std::string& family);
// Refuses (at `key`) a fabric whose estimated memory to build and route exceeds this machine's
// (physical memory, or SLUICE_MEMORY_LIMIT when set: a quantity such as 8GiB), before a byte
// of it is built. The estimate: about 3 KB a device for the graph, flows and workload state,
// plus the router's distance vectors (4 bytes a node, one per switch that devices attach to,
// `attach_switches`), over about 1.25 nodes a device. At 102,400 GPUs on a multi-plane
// fat-tree (3,200 leaves) it gives 1.95 GB; the run's peak was 1.9 GB.
void check_fabric_memory(const Params& p, const std::string& key, double devices, double attach_switches);
// This machine's memory for that check, in bytes.
double machine_memory_bytes();

// A list of integers with each element checked, errors positioned at the element.
std::vector<int> int_list(const Params& p, const std::string& key, int lo, int hi, size_t min_n, size_t max_n,
                          const std::string& fallback);

}  // namespace sluice::net
