"""The workload: presets, config.json parsing, parameter counting and the default workload."""

from hwadvisor.workload.build import (
    DTYPES,
    ENGINES,
    OPTIMIZERS,
    PHASES,
    build_workload,
    default_model,
    engine_model_name,
    list_presets,
    load_spec,
    parse_choice,
    preset_source,
)
from hwadvisor.workload.configparse import parse_config, supported_model_types
from hwadvisor.workload.params import count_params, moe_layer_count, param_breakdown
from hwadvisor.workload.request import WORKLOAD_OPTIONS, Sizing, WorkloadRequest

__all__ = [
    "WORKLOAD_OPTIONS",
    "Sizing",
    "WorkloadRequest",
    "DTYPES",
    "ENGINES",
    "OPTIMIZERS",
    "PHASES",
    "build_workload",
    "count_params",
    "default_model",
    "list_presets",
    "load_spec",
    "moe_layer_count",
    "param_breakdown",
    "parse_choice",
    "parse_config",
    "engine_model_name",
    "preset_source",
    "supported_model_types",
]
