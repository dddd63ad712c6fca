// Loading and saving node models: Tide's own XML schema, NCCL's topology
// XML (<system version="1">), hwloc XML, and live detection.
//
// Every loader returns a normalized model (paths computed). Thread-safe:
// no shared state except detectLocal()'s per-process cache.
#pragma once

#include <string>

#include "core/status.h"
#include "topology/model.h"
#include "topology/xml.h"

namespace tide::topo {

// Tide schema (flat: one element per device, parents by id, then links):
//   <tide-topology version="1" host="h">
//     <cpu id="0" numa="0" cpus="0-55" cores="56"/>
//     <pci-switch id="2" parent="0" bus="0000:15:00.0" pcie-gbs="63.0"/>
//     <gpu id="4" parent="2" bus="0000:18:00.0" pcie-gbs="63.0"/>
//     <nic id="5" parent="2" bus="0000:19:00.0" name="mlx5_0" speed-gbs="50.0" rdma="1"/>
//     <nvswitch id="20"/>
//     <link a="4" b="20" type="nvlink" count="18" gbs="450.0"/>
//   </tide-topology>
// `canonical` leaves out what other sources cannot know (host name, core
// counts) so that descriptions of one machine compare equal as text.
std::string writeTideXml(const NodeTopo& t, bool canonical = false);
Status readTideXml(const XmlNode& root, NodeTopo* t);

// NCCL's schema: <system><cpu numaid affinity><pci busid class link_speed
// link_width> (nested pci = switch) <gpu sm><nvlink target count tclass/>
// </gpu></pci><pci><nic><net name speed/></nic></pci></cpu></system>.
// Every NVLink target that is not a GPU is an NVSwitch.
Status readNcclXml(const XmlNode& root, NodeTopo* t);

// hwloc: packages, NUMA nodes, cores and the PCI tree. GPUs are NVIDIA/AMD
// display or 3D controllers, NICs network/InfiniBand controllers (named by
// their OpenFabrics device, else their interface), NVSwitches NVIDIA
// "bridge other" devices; NVLinks come from hwloc's "NVLinkBandwidth"
// distances (MB/s). hwloc records no port rate: a NIC's speed is its
// "TideSpeedMbps" info attribute in XML, sysfs when detecting live.
// Fails with tideInvalidUsage when Tide was built without hwloc.
Status readHwlocXml(const std::string& text, NodeTopo* t);

// Dispatches on the root element (tide-topology, system, topology).
Status loadTopoText(const std::string& text, NodeTopo* t);
Status loadTopoFile(const std::string& path, NodeTopo* t);

// This node: hwloc live (with I/O devices) plus NVML NVLinks and sysfs NIC
// speeds; without hwloc, sysfs only. Cached after the first call (the
// machine does not change under a process). Thread-safe.
Status detectLocal(NodeTopo* t);

// Pieces used by detection (detect_sysfs.cc, nvml.cc).
// NIC port speed in GB/s from sysfs (RDMA device rate, else interface
// speed); 0 when unknown.
double sysfsNicSpeedGBs(const std::string& name, const std::string& bus);
// RDMA device name of a PCI device ("mlx5_0"), "" when none.
std::string sysfsRdmaDevice(const std::string& bus);
// CPUs, NUMA nodes and GPUs/NICs (attached to their NUMA node's socket) from
// /sys, for builds without hwloc.
Status detectSysfs(NodeTopo* t);
// Adds NVLink links between GPUs (and to an NVSwitch) found through NVML,
// loaded with dlopen; does nothing when libnvidia-ml.so.1 is absent.
void addNvmlLinks(NodeTopo* t);

}  // namespace tide::topo
