"""`hpcmem model export | status`: the embedding model and its torch-free ONNX export."""

from __future__ import annotations

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE

app = typer.Typer(help="The embedding model: export it to ONNX once, so queries need no torch.",
                  no_args_is_help=True)


@app.command("export")
def model_export(
    force: bool = typer.Option(False, "--force", help="Export again even when a verified export exists."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Export the configured model to ONNX (needs torch; run once, at install time)."""
    from hpcmem.kb.recall.embed import model_spec
    from hpcmem.kb.recall.onnx_encoder import export_onnx

    spec = model_spec(STATE.config)
    export, made = export_onnx(spec, spec.onnx_dir, force=force)
    info = {"model_id": spec.model_id, "path": str(export.path), "made": made, **export.record}
    if json_:
        emit_json(info)
        return
    verb = "exported" if made else "already exported"
    stdout.print(f"{verb}: {export.path} (sha256 {export.record['onnx_sha256'][:12]}…, "
                 f"min cosine to sentence-transformers {export.record['checked']['min_cosine']})")


@app.command("status")
def model_status(json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Which model and encoder queries use (reads the export's record; loads no model)."""
    from hpcmem.kb.recall.embed import model_spec
    from hpcmem.kb.recall.onnx_encoder import export_path, ready_export

    spec = model_spec(STATE.config)
    export = ready_export(spec, spec.onnx_dir) if spec.encoder != "sentence-transformers" else None
    info = {
        "model_id": spec.model_id, "model_dir": str(spec.path), "encoder_setting": spec.encoder,
        "encoder": "onnx" if export is not None else "sentence-transformers",
        "onnx_path": str(export_path(spec, spec.onnx_dir)), "onnx_sha256": export.record["onnx_sha256"] if export else None,
    }
    if json_:
        emit_json(info)
        return
    for key, value in info.items():
        stdout.print(f"{key}: {value}")
