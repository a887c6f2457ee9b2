"""The engines: one data file per engine (data/<id>.toml), its schema, choice and renderer.

Adding an engine is one file in data/ (defaults with sources, costs, kernels, formats, config)
plus its id in schema.ENGINE_IDS; tests/engines/test_engine_data.py refuses an engine without
costs, kernels or a config, and the flag tables under tests/fixtures/engine_flags/ hold every
emitted flag to the engine's own parser at the pinned version. A new value a template may use
is one field of values.PlanValues, the vocabulary between a plan and an engine's config.
"""

from hwadvisor.engines.baseline import baseline, baseline_options
from hwadvisor.engines.catalog import (
    default_engine,
    defaults_text,
    engine_for,
    get_engine,
    load_engines,
    parse_options,
    pick_engine,
    split_engine_spec,
)
from hwadvisor.engines.render import (
    RenderedConfig,
    render_config,
    render_pd,
    step_note,
)
from hwadvisor.engines.schema import ENGINE_IDS, LAYOUT_KEYS, STEP_FORMS, STEP_IDS, Engine
from hwadvisor.engines.values import PlanValues

__all__ = [
    "ENGINE_IDS", "LAYOUT_KEYS", "STEP_FORMS", "STEP_IDS", "Engine", "PlanValues", "RenderedConfig",
    "baseline", "baseline_options", "default_engine", "defaults_text", "engine_for", "get_engine",
    "load_engines", "parse_options", "pick_engine", "render_config", "render_pd",
    "split_engine_spec",
    "step_note",
]
