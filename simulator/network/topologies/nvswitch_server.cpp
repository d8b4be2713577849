// `nvswitch-server`: one 8-GPU server (DGX/HGX H100, H200): NVLink to an NVSwitch crossbar,
// PCIe to the host CPUs.
#include "network/topologies/keys.h"

namespace sluice::net {

SLUICE_REGISTER(component, topology_nvswitch_server) {
  Schema s;
  add_common_topology_keys(s);
  const Binding<ServerSpec> server = server_keys(s, "2");
  reg.add("topology", "nvswitch-server", "one 8-GPU server: NVLink to an NVSwitch crossbar, PCIe to the host CPUs (DGX/HGX H100, H200)",
          s, TopologyFactory([server](const Params& p, const std::string& name) {
            const ServerSpec spec = server.make(p);
            check_server(p, spec);
            Topology t(name);
            t.family = "nvswitch-server";
            add_server(t, 0, spec);
            return t;
          }));
}

}  // namespace sluice::net
