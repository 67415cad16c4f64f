"""The server_args view (every argument of a server's start line) and config_pairs (prefill
against decode on the arguments that must agree), on the lines as the engines print them.
Each line's origin beside it."""

from __future__ import annotations

from pathlib import Path

import forensics

# SGLang's start-up line as sgl-project/sglang#5709 prints it (parsers/patterns/sglang.toml's
# sample), on a prefill host
SGLANG_CALL = (
    "[2026-11-02 10:00:01] server_args=ServerArgs(model_path='/models/DeepSeek-V3', "
    "disaggregation_mode='prefill', disaggregation_transfer_backend='mooncake', "
    "page_size=64, chunked_prefill_size=8192, tp_size=8, json_model_override_args='{}')"
)
# SGLang 0.5.23 logs a dict (srt/entrypoints/engine.py: `logger.info(f"server_args=
# {_server_args_for_logging(server_args)}")`): the same arguments in that shape, decode's,
# its page size not prefill's (hand-written: no field log of 0.5.23 was found)
SGLANG_DICT = (
    "[2026-11-02 10:00:02] server_args={'model_path': '/models/DeepSeek-V3', "
    "'disaggregation_mode': 'decode', 'disaggregation_transfer_backend': 'mooncake', "
    "'page_size': 32, 'tp_size': 8, 'cuda_graph_bs': [1, 2, 4]}"
)
# vLLM 0.10.1.1's API server start (vllm-project/vllm#24230)
VLLM = (
    "(APIServer pid=82793) INFO 09-02 17:27:43 [utils.py:326] non-default args: {'model_tag': "
    "'meta-llama/Llama-3.1-8B-Instruct', 'chat_template': "
    "'custom/tool_chat_template_llama3.1_json.jinja', 'enable_auto_tool_choice': True, "
    "'tool_call_parser': 'llama3_json', 'model': 'meta-llama/Llama-3.1-8B-Instruct'}"
)


def test_every_argument_of_each_start_line_and_the_pairs_that_disagree(tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    for host, line, fmt in (("prefill-0", SGLANG_CALL, "sglang"),
                            ("decode-0", SGLANG_DICT, "sglang"), ("vllm-0", VLLM, "cat")):  # fmt: skip
        path = tmp_path / f"{host}.log"
        path.write_text(line + "\n")
        forensics.ingest([str(path)], db, host=host, fmt=fmt, run="r")
    _, rows = forensics.query_rows(
        "SELECT host, engine, side, args FROM server_args ORDER BY host", db)  # fmt: skip
    got = {h: (engine, side, args) for h, engine, side, args in rows}
    assert got["prefill-0"][:2] == ("sglang", "prefill")
    assert got["prefill-0"][2]["page_size"] == "64"
    assert got["prefill-0"][2]["model_path"] == "/models/DeepSeek-V3"
    assert got["prefill-0"][2]["json_model_override_args"] == "{}"
    assert len(got["prefill-0"][2]) == 7
    assert got["decode-0"][:2] == ("sglang", "decode")
    assert got["decode-0"][2]["cuda_graph_bs"] == "[1, 2, 4]" and len(got["decode-0"][2]) == 6
    assert got["vllm-0"][:2] == ("vllm", None)
    assert got["vllm-0"][2]["enable_auto_tool_choice"] == "True" and len(got["vllm-0"][2]) == 5
    _, pairs = forensics.query_rows(
        "SELECT prefill_host, decode_host, name, prefill_value, decode_value FROM config_pairs", db
    )
    assert pairs == [("prefill-0", "decode-0", "page_size", "64", "32")]
