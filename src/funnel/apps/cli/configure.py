"""`funnel config`: the effective settings, and where each value came from."""

from __future__ import annotations

import json

from funnel.apps.cli.common import IndexOpt, JsonOpt, app, out, settings_from
from funnel.apps.settings import explain_settings


@app.command()
def config(index: IndexOpt = None, as_json: JsonOpt = False) -> None:
    """Print the effective configuration: every setting by section, its value (secrets masked) and where it
    came from (flag, FUNNEL_* environment, funnel.toml, or the default)."""
    settings = settings_from(index=index)
    rows = explain_settings(settings, flags={"index": index})
    if as_json:
        out.print(json.dumps([{"setting": n, "value": v, "source": s} for n, v, s in rows], indent=2))
        return
    width = max(len(name.rpartition(".")[2]) for name, _, _ in rows)
    section = None
    for name, value, source in rows:
        here = name.split(".")[0] if "." in name else ""
        if here != section:
            section = here
            out.print(f"[{here}]" if here else "# top level")
        out.print(f"  {name.rpartition('.')[2]:<{width}}  {json.dumps(value)}  ({source})")
