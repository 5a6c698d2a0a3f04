import json
from pathlib import Path

out = Path(__file__).parent
out.mkdir(parents=True, exist_ok=True)
NS = {"nvml_error": 3}
GiB = 2**30


def dev(name, uuid, bus, total_gb, used_gb, util, temp, power_w, limit_w, cc, pcie, **extra):
    d = {
        "name": name,
        "uuid": uuid,
        "pci_bus_id": bus,
        "memory": [int(total_gb * GiB), int((total_gb - used_gb) * GiB), int(used_gb * GiB)],
        "utilization": list(util),
        "temperature": temp,
        "power_usage_mw": int(power_w * 1000),
        "power_limit_mw": int(limit_w * 1000),
        "clock_sm": 2520,
        "clock_mem": 10501,
        "compute_capability": list(cc),
        "pcie_gen": pcie[0],
        "pcie_width": pcie[1],
        "pcie_max_gen": pcie[2],
        "pcie_max_width": pcie[3],
        "persistence_mode": 1,
        "mig_mode": NS,
        "ecc_uncorrected": NS,
        "processes": [],
        "nvlinks": {},
    }
    d.update(extra)
    return d


# 1. A consumer workstation: two RTX 4090s on PCIe, P2P disabled by the driver, one GPU busy.
ws = {
    "source": "RTX 4090 workstation (values in nvidia-ml-py shapes; ECC and MIG NOT_SUPPORTED on GeForce)",
    "driver_version": "550.120",
    "cuda_driver_version": 12040,
    "devices": [
        dev(
            "NVIDIA GeForce RTX 4090",
            "GPU-5d1e5a2c-0000-4090-aaaa-000000000000",
            "00000000:01:00.0",
            23.99,
            0.4,
            (0, 0),
            34,
            21.5,
            450,
            (8, 9),
            (1, 16, 4, 16),
            persistence_mode=0,
        ),
        dev(
            "NVIDIA GeForce RTX 4090",
            "GPU-7f3b9c11-0000-4090-bbbb-111111111111",
            "00000000:41:00.0",
            23.99,
            18.2,
            (97, 62),
            71,
            402.3,
            450,
            (8, 9),
            (4, 16, 4, 16),
            persistence_mode=0,
            processes=[[1, int(17.8 * GiB)]],
        ),
    ],
    "pairs": {"0-1": {"topology": 50, "p2p_read": 2}},
}
# 2. Two A100 PCIe cards joined by an NVLink bridge (4 links each way), MIG off, ECC on.
a100 = {
    "source": "2x A100 80GB PCIe with NVLink bridge",
    "driver_version": "535.183.01",
    "cuda_driver_version": 12020,
    "devices": [
        dev(
            "NVIDIA A100 80GB PCIe",
            "GPU-aaaa0000-a100-0000-0000-000000000000",
            "00000000:17:00.0",
            80,
            0.5,
            (0, 0),
            31,
            45,
            300,
            (8, 0),
            (4, 16, 4, 16),
            mig_mode=[0, 0],
            ecc_uncorrected=0,
            nvlinks={str(i): "00000000:65:00.0" for i in range(4)},
        ),
        dev(
            "NVIDIA A100 80GB PCIe",
            "GPU-bbbb1111-a100-0000-0000-000000000000",
            "00000000:65:00.0",
            80,
            0.5,
            (0, 0),
            30,
            44,
            300,
            (8, 0),
            (4, 16, 4, 16),
            mig_mode=[0, 0],
            ecc_uncorrected=0,
            nvlinks={str(i): "00000000:17:00.0" for i in range(4)},
        ),
    ],
    "pairs": {"0-1": {"topology": 30, "p2p_read": 0}},
}
# 3. An NVSwitch box: four H100 SXM, 18 links each into switches; the remote ends are switch bus ids.
h100 = {
    "source": "4 of 8 H100 80GB HBM3 on NVSwitch",
    "driver_version": "550.90.07",
    "cuda_driver_version": 12040,
    "devices": [],
    "pairs": {},
}
buses = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]
for i, bus in enumerate(buses):
    h100["devices"].append(
        dev(
            "NVIDIA H100 80GB HBM3",
            f"GPU-cccc{i}000-h100-0000-0000-000000000000",
            bus,
            79.65,
            0.5,
            (0, 0),
            33 + i,
            70,
            700,
            (9, 0),
            (5, 16, 5, 16),
            mig_mode=[0, 0],
            ecc_uncorrected=0,
            nvlinks={str(link): f"00000000:{0xA0 + link % 4:02X}:00.0" for link in range(18)},
        )
    )
for i in range(4):
    for j in range(i + 1, 4):
        h100["pairs"][f"{i}-{j}"] = {"topology": 40 if (i < 2) == (j < 2) else 50, "p2p_read": 0}
# 4. MIG enabled on an A100: per-process memory is not available, utilization NOT_SUPPORTED.
mig = {
    "source": "A100 SXM4 40GB with MIG enabled",
    "driver_version": "535.183.01",
    "cuda_driver_version": 12020,
    "devices": [
        dev(
            "NVIDIA A100-SXM4-40GB",
            "GPU-dddd0000-a100-mig0-0000-000000000000",
            "00000000:07:00.0",
            40,
            2.1,
            (0, 0),
            29,
            52,
            400,
            (8, 0),
            (4, 16, 4, 16),
            mig_mode=[1, 1],
            ecc_uncorrected=0,
            utilization=NS,
            processes=[[1, None]],
        )
    ],
}
# 5. A GPU that falls off the bus after three samples (Xid 79).
lost = {
    "source": "1x L40S that is lost mid-run",
    "driver_version": "550.90.07",
    "cuda_driver_version": 12040,
    "devices": [
        dev(
            "NVIDIA L40S",
            "GPU-eeee0000-l40s-0000-0000-000000000000",
            "00000000:81:00.0",
            44.99,
            30.0,
            (99, 70),
            80,
            340,
            350,
            (8, 9),
            (4, 16, 4, 16),
            ecc_uncorrected=0,
            mig_mode=NS,
            lost_after_samples=3,
            timeline=[
                {"utilization": [99, 70], "power_usage_mw": 340000},
                {"utilization": [100, 5], "power_usage_mw": 95000},
                {"utilization": [100, 5], "power_usage_mw": 94000},
            ],
        )
    ],
}
for name, rec in {
    "workstation_2x4090": ws,
    "a100_pcie_nvlink_bridge": a100,
    "h100_nvswitch_4": h100,
    "a100_mig": mig,
    "l40s_lost_midrun": lost,
    "no_driver": {"source": "no libnvidia-ml.so.1", "init_error": 12},
    "driver_not_loaded": {"source": "kernel module not loaded", "init_error": 9},
    "driver_mismatch": {"source": "driver upgraded without reloading the module", "init_error": 18},
}.items():
    (out / f"{name}.json").write_text(json.dumps(rec, indent=1))
print(sorted(p.name for p in out.iterdir()))
