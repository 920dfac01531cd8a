"""Chrome trace export (loads in Perfetto and chrome://tracing).

One process, two tracks: "host recording" (input uploads, command encoding, CPU-fallback layers
with their downloads and uploads, submit + readback wait) and "GPU queue" (each GPU layer, named
``name (op_type)``). On the cpu backend the layers are on a "CPU kernels" track. Events are laid
out back to back from the median durations of the instrumented runs, in execution order.
"""

from __future__ import annotations

from typing import Any

HOST, DEVICE = 1, 2


def chrome_trace(data: dict[str, Any]) -> dict[str, Any]:
    """The profile as a Chrome trace-event document."""
    gpu = data["backend"] != "cpu"
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": f"wgsentis {data['name']}"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": HOST, "args": {"name": "host recording"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": DEVICE,
         "args": {"name": "GPU queue" if gpu else "CPU kernels"}},
    ]
    t = 0.0  # microseconds

    def add(tid: int, name: str, ms: float, cat: str, args: dict[str, Any] | None = None) -> None:
        nonlocal t
        events.append({"ph": "X", "pid": 1, "tid": tid, "name": name, "cat": cat, "ts": round(t, 3),
                       "dur": round(max(ms, 0.0) * 1e3, 3), "args": args or {}})
        t += max(ms, 0.0) * 1e3

    transfers = data.get("transfers") or []
    host = {r["name"]: r for r in data.get("host") or []}
    for tr in transfers:
        if tr["kind"] == "upload" and tr["layer"] == "input":
            add(HOST, f"Upload {tr['tensor']}", tr["time_ms"], "transfer", {"bytes": tr["bytes"]})
    if "host: encode commands" in host:
        add(HOST, "encode commands", host["host: encode commands"]["time_ms"], "host")
    for e in data.get("layers") or []:
        name = f"{e['name']} ({e['op_type']})"
        if e["fallback"]:
            for tr in transfers:
                if tr["kind"] == "download" and tr["layer"] == e["name"]:
                    add(HOST, f"Download {tr['tensor']}", tr["time_ms"], "transfer", {"bytes": tr["bytes"]})
            add(HOST, name + " [CPU fallback]", e["time_ms"] or 0.0, "fallback", {"flops": e["flops"]})
            for tr in transfers:
                if tr["kind"] == "upload" and tr["layer"] == e["name"]:
                    add(HOST, f"Upload {tr['tensor']}", tr["time_ms"], "transfer", {"bytes": tr["bytes"]})
        else:
            add(DEVICE, name, e["time_ms"] or 0.0, "layer",
                {"flops": e["flops"], "bytes": e["bytes"], "gflops_per_s": e["gflops_per_s"], "bound": e["bound"]})
    outputs = [tr for tr in transfers if tr["kind"] == "download" and tr["layer"] == "output"]
    for label, row in host.items():
        if label == "host: encode commands":
            continue
        add(HOST, label.removeprefix("host: "), row["time_ms"], "host",
            {"downloads": [f"{tr['tensor']} ({tr['bytes']} B)" for tr in outputs]} if outputs else {})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": data["model"], "backend": data["backend"], "timer": data.get("timer"),
                          "ms_per_batch": data.get("ms_per_batch"),
                          "layout": "median durations laid out back to back in execution order"}}
