#!/usr/bin/env python3
"""Writes the hwloc-XML form of the hand-described fixture machines.

hwloc XML lists every core and hardware thread, so it is generated from the
same facts the NCCL- and Tide-schema files state by hand (see README.md).
NVLinks are added as hwloc's "NVLinkBandwidth" distances (MB/s) with
hwloc-annotate, the way hwloc's NVML backend records them. NIC port rates,
which hwloc does not record, go in a "TideSpeedMbps" info attribute.

Usage: make_hwloc_fixtures.py OUTDIR   (needs hwloc-annotate from hwloc 2.x)
"""
import os
import subprocess
import sys
import tempfile

GEN5X16 = "63.015385"   # 32 GT/s x16, 128b/130b
GEN4X16 = "31.507692"   # 16 GT/s x16

# Per machine: sockets (first core, cores, threads per core, numa),
# switches (socket, bus, downstream devices), nvswitch buses, per-GPU links.
MACHINES = {
    "dgx_h100": {
        "host": "dgx-h100-fixture",
        "cpu": ("GenuineIntel", "Intel(R) Xeon(R) Platinum 8480C"),
        "sockets": [(0, 56), (56, 56)], "threads": 2, "total_cores": 112,
        "link": GEN5X16,
        "switches": [
            # (socket, switch bus, [(kind, bus, name, speedMbps)])
            (0, "0000:16:00.0", [("gpu", "0000:18:00.0"), ("nic", "0000:19:00.0", "mlx5_0", 400000)]),
            (0, "0000:28:00.0", [("gpu", "0000:2a:00.0"), ("nic", "0000:29:00.0", "mlx5_1", 400000)]),
            (0, "0000:38:00.0", [("gpu", "0000:3a:00.0"), ("nic", "0000:39:00.0", "mlx5_2", 400000)]),
            (0, "0000:5b:00.0", [("gpu", "0000:5d:00.0"), ("nic", "0000:5c:00.0", "mlx5_3", 400000)]),
            (1, "0000:98:00.0", [("gpu", "0000:9a:00.0"), ("nic", "0000:99:00.0", "mlx5_4", 400000)]),
            (1, "0000:a9:00.0", [("gpu", "0000:ab:00.0"), ("nic", "0000:aa:00.0", "mlx5_5", 400000)]),
            (1, "0000:b8:00.0", [("gpu", "0000:ba:00.0"), ("nic", "0000:b9:00.0", "mlx5_6", 400000)]),
            (1, "0000:d9:00.0", [("gpu", "0000:db:00.0"), ("nic", "0000:da:00.0", "mlx5_7", 400000)]),
        ],
        # Four NVSwitch chips; each GPU has 18 NVLink4 links: 5, 4, 4, 5.
        "nvswitches": ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"],
        "nvlinks_per_switch": [5, 4, 4, 5],
        "gpu_id": "10de:2330",
    },
    "pcie_8gpu": {
        "host": "pcie-8gpu-fixture",
        "cpu": ("GenuineIntel", "Intel(R) Xeon(R) Gold 6330"),
        "sockets": [(0, 28), (28, 28)], "threads": 2, "total_cores": 56,
        "link": GEN4X16,
        "switches": [
            (0, "0000:17:00.0", [("gpu", "0000:1b:00.0"), ("gpu", "0000:1c:00.0"),
                                 ("nic", "0000:1d:00.0", "mlx5_0", 200000)]),
            (0, "0000:30:00.0", [("gpu", "0000:34:00.0"), ("gpu", "0000:35:00.0")]),
            (1, "0000:ca:00.0", [("gpu", "0000:ce:00.0"), ("gpu", "0000:cf:00.0"),
                                 ("nic", "0000:d0:00.0", "mlx5_1", 200000)]),
            (1, "0000:e1:00.0", [("gpu", "0000:e5:00.0"), ("gpu", "0000:e6:00.0")]),
        ],
        "nvswitches": [], "nvlinks_per_switch": [],
        "gpu_id": "10de:26b9",
    },
}


class Gen:
    def __init__(self):
        self.gp = 1
        self.lines = []

    def next_gp(self):
        self.gp += 1
        return self.gp

    def out(self, depth, text):
        self.lines.append("  " * depth + text)


def hexmask(cpus):
    v = 0
    for c in cpus:
        v |= 1 << c
    groups = []
    while True:
        groups.append(v & 0xffffffff)
        v >>= 32
        if v == 0:
            break
    return ",".join("0x%08x" % g for g in reversed(groups))


def machine_xml(m):
    g = Gen()
    total = m["total_cores"]
    threads = m["threads"]
    socket_cpus = []
    for first, n in m["sockets"]:
        cpus = [first + i + t * total for t in range(threads) for i in range(n)]
        socket_cpus.append(sorted(cpus))
    allc = sorted(c for s in socket_cpus for c in s)
    allnodes = hexmask(range(len(m["sockets"])))
    g.out(0, '<?xml version="1.0" encoding="UTF-8"?>')
    g.out(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    g.out(0, '<topology version="2.0">')
    ms = hexmask(allc)
    g.out(1, '<object type="Machine" os_index="0" cpuset="%s" complete_cpuset="%s" allowed_cpuset="%s" '
             'nodeset="%s" complete_nodeset="%s" allowed_nodeset="%s" gp_index="1">' % (ms, ms, ms, allnodes, allnodes, allnodes))
    g.out(2, '<info name="Backend" value="Linux"/>')
    g.out(2, '<info name="HostName" value="%s"/>' % m["host"])
    g.out(2, '<info name="Architecture" value="x86_64"/>')
    pcidev_order = []  # logical order of PCIDev objects (depth-first)
    core_index = 0
    for s, (first, n) in enumerate(m["sockets"]):
        cs = hexmask(socket_cpus[s])
        ns = hexmask([s])
        g.out(2, '<object type="Package" os_index="%d" cpuset="%s" complete_cpuset="%s" nodeset="%s" '
                 'complete_nodeset="%s" gp_index="%d">' % (s, cs, cs, ns, ns, g.next_gp()))
        g.out(3, '<info name="CPUVendor" value="%s"/>' % m["cpu"][0])
        g.out(3, '<info name="CPUModel" value="%s"/>' % m["cpu"][1])
        g.out(3, '<object type="NUMANode" os_index="%d" cpuset="%s" complete_cpuset="%s" nodeset="%s" '
                 'complete_nodeset="%s" gp_index="%d" local_memory="1099511627776"/>' % (s, cs, cs, ns, ns, g.next_gp()))
        for i in range(n):
            core = first + i
            pus = [core + t * total for t in range(threads)]
            c = hexmask(pus)
            g.out(3, '<object type="Core" os_index="%d" cpuset="%s" complete_cpuset="%s" nodeset="%s" '
                     'complete_nodeset="%s" gp_index="%d">' % (core_index, c, c, ns, ns, g.next_gp()))
            core_index += 1
            for pu in pus:
                p = hexmask([pu])
                g.out(4, '<object type="PU" os_index="%d" cpuset="%s" complete_cpuset="%s" nodeset="%s" '
                         'complete_nodeset="%s" gp_index="%d"/>' % (pu, p, p, ns, ns, g.next_gp()))
            g.out(3, '</object>')
        # One host bridge per switch (one root complex per slot group), then
        # root port -> switch upstream port -> downstream ports -> devices.
        for sock, swbus, devs in m["switches"]:
            if sock != s:
                continue
            dom, bus = swbus[:4], int(swbus[5:7], 16)
            hi = bus + 8
            g.out(3, '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="%s:[%02x-%02x]">'
                  % (g.next_gp(), dom, bus - 1, hi))
            g.out(4, '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="1" bridge_pci="%s:[%02x-%02x]" '
                     'pci_busid="%s:%02x:01.0" pci_type="0604 [8086:352a] [0000:0000] 04" pci_link_speed="%s">'
                  % (g.next_gp(), dom, bus, hi, dom, bus - 1, m["link"]))
            g.out(5, '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="2" bridge_pci="%s:[%02x-%02x]" '
                     'pci_busid="%s" pci_type="0604 [1000:c030] [1000:100b] b0" pci_link_speed="%s">'
                  % (g.next_gp(), dom, bus + 1, hi, swbus, m["link"]))
            for k, d in enumerate(devs):
                dbus = int(d[1][5:7], 16)
                g.out(6, '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="3" bridge_pci="%s:[%02x-%02x]" '
                         'pci_busid="%s:%02x:%02x.0" pci_type="0604 [1000:c030] [1000:100b] b0" pci_link_speed="%s">'
                      % (g.next_gp(), dom, dbus, dbus, dom, bus + 1, k, m["link"]))
                if d[0] == "gpu":
                    g.out(7, '<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="0302 [%s] [%s] a1" '
                             'pci_link_speed="%s"/>' % (g.next_gp(), d[1], m["gpu_id"], m["gpu_id"], m["link"]))
                else:
                    g.out(7, '<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="0207 [15b3:1021] [15b3:0041] 00" '
                             'pci_link_speed="%s">' % (g.next_gp(), d[1], m["link"]))
                    g.out(8, '<info name="TideSpeedMbps" value="%d"/>' % d[3])
                    g.out(8, '<object type="OSDev" gp_index="%d" name="%s" subtype="OpenFabrics" osdev_type="3"/>'
                          % (g.next_gp(), d[2]))
                    g.out(8, '<object type="OSDev" gp_index="%d" name="ibp%ss0" subtype="Network" osdev_type="2"/>'
                          % (g.next_gp(), d[1][5:7]))
                    g.out(7, '</object>')
                pcidev_order.append(d[1])
                g.out(6, '</object>')
            g.out(5, '</object>')
            g.out(4, '</object>')
            g.out(3, '</object>')
        if s == 0 and m["nvswitches"]:
            g.out(3, '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[04-08]">' % g.next_gp())
            for k, nb in enumerate(m["nvswitches"]):
                g.out(4, '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="1" bridge_pci="0000:[%s-%s]" '
                         'pci_busid="0000:04:%02x.0" pci_type="0604 [8086:352a] [0000:0000] 04" pci_link_speed="3.938462">'
                      % (g.next_gp(), nb[5:7], nb[5:7], k))
                g.out(5, '<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="0680 [10de:22a3] [10de:1796] a1" '
                         'pci_link_speed="3.938462"/>' % (g.next_gp(), nb))
                pcidev_order.append(nb)
                g.out(4, '</object>')
            g.out(3, '</object>')
        g.out(2, '</object>')
    g.out(1, '</object>')
    g.out(0, '</topology>')
    return "\n".join(g.lines) + "\n", pcidev_order


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, m in MACHINES.items():
        xml, order = machine_xml(m)
        out = os.path.join(outdir, name + ".hwloc.xml")
        if not m["nvswitches"]:
            open(out, "w").write(xml)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            base = os.path.join(tmp, "base.xml")
            open(base, "w").write(xml)
            gpus = [d[1] for sw in m["switches"] for d in sw[2] if d[0] == "gpu"]
            objs = gpus + m["nvswitches"]
            n = len(objs)
            vals = [[0] * n for _ in range(n)]
            for gi in range(len(gpus)):
                for si, links in enumerate(m["nvlinks_per_switch"]):
                    mbs = links * 25000  # NVLink4: 25 GB/s per link and direction
                    a, b = gi, len(gpus) + si
                    vals[a][b] = vals[b][a] = mbs
            dist = os.path.join(tmp, "nvlink.txt")
            # kind 5 = FROM_OS | MEANS_BANDWIDTH... see hwloc/distances.h:
            # FROM_OS=1, FROM_USER=2, MEANS_LATENCY=4, MEANS_BANDWIDTH=8.
            lines = ["name=NVLinkBandwidth", "9", str(n)]
            lines += ["PCIDev:%d" % order.index(o) for o in objs]
            lines += [str(v) for row in vals for v in row]
            open(dist, "w").write("\n".join(lines) + "\n")
            subprocess.run(["hwloc-annotate", base, out, "all", "distances", dist], check=True)


if __name__ == "__main__":
    main()
