"""Device-to-device copy bandwidth of every visible GPU (bytes read + written per second,
median of 20 copies of 1 GiB, after 3 warm-up copies): the roofline the CUDA notes hold
decode figures against. Used by the device scripts (cuda_device_run.sh, cuda_tp_run.sh)."""
import torch

for d in range(torch.cuda.device_count()):
    with torch.cuda.device(d):  # (events and copies on the same device's stream)
        x = torch.empty(1 << 30, dtype=torch.uint8, device=f"cuda:{d}")
        y = torch.empty_like(x)
        for _ in range(3):
            y.copy_(x)
        torch.cuda.synchronize(d)
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        ts = []
        for _ in range(20):
            s.record()
            y.copy_(x)
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e))
        ts.sort()
        t = ts[len(ts) // 2] / 1e3
        print(f"cuda:{d}: copy 1 GiB: median {t * 1e3:.3f} ms -> {2 * (1 << 30) / t / 1e9:.0f} GB/s (read+write)")
