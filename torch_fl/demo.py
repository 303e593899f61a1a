"""`python -m torch_fl.demo`: train ResNet-18 on the first flsdk device.

What it shows, in order:
1. the devices torch_fl sees and the one it picks (first non-CPU device);
2. a few SGD steps of ResNet-18 (3x32x32 random but seeded data, batch 8) on
   that device and, from the same weights, on the CPU: the loss per step on both;
3. the fallback log: which ops had no native kernel and ran on the CPU;
4. a layer-by-layer precision report (torch_fl.compare_model) of the model on
   the device against the CPU: the first divergent layer, or "none";
5. with --profile trace.json: one more training step under torch.profiler, host and
   device activity, written as a Chrome trace (open it in https://ui.perfetto.dev or
   chrome://tracing), and the ops that took the most device time.

Exit status 0; 1 only if no device backend is installed or loadable.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time


def _train(model, batches, device, lr: float) -> list[float]:
    import torch
    from torch.nn import functional as F

    model = model.to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().to("cpu")))
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_fl.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", help="device to train on (default: first non-CPU device)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", metavar="TRACE.json",
                        help="profile one training step on the device and write its trace here")
    args = parser.parse_args(argv)

    import torch
    from torch.nn import functional as F

    import torch_fl
    from torch_fl.models import resnet18

    print(f"torch_fl {torch_fl.__version__}, torch {torch.__version__}")
    devices = torch_fl.list_devices()
    print("devices:", ", ".join(devices))
    device = args.device or next((d for d in devices if d != "cpu"), None)
    if device is None:
        reasons = [f"  {r['name']} ({r['package']}): {r['error']}"
                   for r in torch_fl.backend_reports() if not r["loaded"]]
        print("no flsdk device backend is installed" if not reasons else
              "no flsdk device backend could be loaded:\n" + "\n".join(reasons),
              file=sys.stderr)
        print("install one, e.g.: pip install --no-build-isolation examples/acme_backend",
              file=sys.stderr)
        return 1
    dev = torch_fl.init_device(device)
    info = torch_fl.device_info(dev)
    print(f"training on {dev} ({info['display_name']}, "
          f"{info['memory_capacity'] / 2**30:.1f} GiB, built for torch "
          f"{info['torch_version_built_for']})")

    torch_fl.set_fallback_mode(True, dev)
    torch_fl.clear_fallback_log(dev)

    torch.manual_seed(args.seed)
    model = resnet18(num_classes=10)
    g = torch.Generator().manual_seed(args.seed)
    batches = [(torch.randn(args.batch, 3, 32, 32, generator=g),
                torch.randint(0, 10, (args.batch,), generator=g)) for _ in range(args.steps)]
    # torch's first optimizer imports its compile stack (torch._dynamo, ~1 s): pay it
    # before timing, or whichever device trains first is charged with it.
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.01)
    start = time.perf_counter()
    dev_losses = _train(copy.deepcopy(model), batches, dev, lr=0.01)
    dev_time = time.perf_counter() - start
    start = time.perf_counter()
    cpu_losses = _train(copy.deepcopy(model), batches, "cpu", lr=0.01)
    cpu_time = time.perf_counter() - start

    print(f"\nResNet-18, SGD(lr=0.01, momentum=0.9), batch {args.batch}:")
    print(f"{'step':>4}  {'loss on ' + str(dev):>16}  {'loss on cpu':>16}  {'|diff|':>9}")
    for i, (a, b) in enumerate(zip(dev_losses, cpu_losses), 1):
        print(f"{i:>4}  {a:>16.6f}  {b:>16.6f}  {abs(a - b):>9.2e}")
    print(f"time: {dev_time:.2f} s on {dev}, {cpu_time:.2f} s on cpu")

    print()
    print(torch_fl.fallback_report(dev))

    print()
    x, y = batches[0]
    report = torch_fl.compare_model(model, (x,), "cpu", dev, loss_fn=F.cross_entropy,
                                    targets=y, atol=1e-3, rtol=1e-3)
    report.model = "resnet18"
    print(report.table(all_rows=False))
    print(f"({len(report.forward)} module outputs and {len(report.grads)} gradients compared; "
          f"only those out of tolerance are listed)")
    if args.profile:
        print()
        profile_step(copy.deepcopy(model), batches[0], dev, args.profile)
    return 0


def profile_step(model, batch, device, path: str) -> None:
    """One SGD step of `model` on `device` under torch.profiler (CPU and device
    activity; forward, backward and optimizer as record_function ranges), written to
    `path` as a Chrome trace; prints the ops with the most device time."""
    import torch
    from torch.nn import functional as F
    from torch.profiler import ProfilerActivity, profile, record_function

    model = model.to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = batch[0].to(device), batch[1].to(device)

    def step():
        with record_function("forward"):
            loss = F.cross_entropy(model(x), y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.accelerator.synchronize()

    step()  # warm-up: momentum buffers, the allocator's cache
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        step()
    prof.export_chrome_trace(path)
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=8))
    print(f"trace of one training step written to {path}: open it in https://ui.perfetto.dev "
          f"(or chrome://tracing) to see the host threads above and {device}'s streams below")


if __name__ == "__main__":
    sys.exit(main())
