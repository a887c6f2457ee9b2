"""Print the facts of a GPU machine that the trials depend on (versions, op schemas, backends)."""

import importlib
import json
import platform
import sys


def main() -> None:
    facts: dict = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in ("typer", "click", "rich", "psutil", "pynvml", "torch", "triton", "matplotlib",
                 "pydantic"):
        try:
            mod = importlib.import_module(name)
            facts[name] = getattr(mod, "__version__", "present")
        except Exception as exc:  # noqa: BLE001
            facts[name] = f"missing: {exc}"
    try:
        import torch

        facts["cuda"] = torch.version.cuda
        facts["device_count"] = torch.cuda.device_count()
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            facts["device"] = {"name": p.name, "cc": f"{p.major}.{p.minor}",
                               "sms": p.multi_processor_count, "mem": p.total_memory,
                               "l2": getattr(p, "L2_cache_size", None)}
        for op in ("_scaled_mm", "_weight_int4pack_mm", "_convert_weight_to_int4pack",
                   "_weight_int4pack_mm_for_cpu", "_convert_weight_to_int4pack_for_cpu",
                   "_weight_int8pack_mm"):
            try:
                packet = getattr(torch.ops.aten, op)
                if hasattr(packet, "_schemas"):
                    facts[f"schema.{op}"] = [str(s) for s in packet._schemas.values()]
                else:
                    facts[f"schema.{op}"] = str(packet.default._schema)
            except Exception as exc:  # noqa: BLE001
                facts[f"schema.{op}"] = f"error: {exc}"
        try:
            from torch.nn.attention import SDPBackend

            facts["sdpa_backends"] = [b.name for b in SDPBackend]
        except Exception as exc:  # noqa: BLE001
            facts["sdpa_backends"] = f"error: {exc}"
        facts["cudnn"] = torch.backends.cudnn.version()
        facts["nccl"] = str(torch.cuda.nccl.version()) if torch.cuda.is_available() else None
    except Exception as exc:  # noqa: BLE001
        facts["torch_error"] = repr(exc)
    print(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main()
