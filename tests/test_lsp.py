"""Protocol tests: pygls's LanguageClient drives `pallas-fix lsp` in a subprocess.

Expected texts are computed with the engine (`fix_source`, `analyze_source`) on the fixture, never
written out by hand, so the tests follow the codemods as they change.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import libcst as cst
import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.uris import from_fs_path
from pygls.workspace import TextDocument

from pallas_fix.engine import SourceError, analyze_source, fix_source
from pallas_fix import codemods
from pallas_fix.core.plans import FixPlan
from pallas_fix.core.model import FixSafety, Origin
from pallas_fix.output.common import DOCS_URL
from pallas_fix.rules.registry import classify, describe
from pallas_fix.analysis.loops.windows import window_of

TESTS = Path(__file__).resolve().parent
FIX = TESTS / "fixtures" / "lsp"
pytestmark = pytest.mark.timeout(120)


# -- Test-only planner -----------------------------------------------------------------------------
# TEMPORARY STAND-IN, test code only. Until the R4 traced-constant codemod
# (pallas_fix.codemods.traced_constant) lands, PF104 findings have no fix, and the quick-fix tests
# need one whose edit touches two separate lines. This planner rewrites `jnp.int32(<int>)` to the
# int inside a PF104 start, following names to their single assignment. It is registered only when
# no real planner claims PF104, and only in this test process and the servers these tests start
# (`server_command()`); once the real codemod is registered it is never used.
def _is_int32_literal(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and isinstance(node.func.value, cst.Name)
        and node.func.value.value == "jnp"
        and node.func.attr.value == "int32"
        and len(node.args) == 1
        and isinstance(node.args[0].value, cst.Integer)
    )


def _stub_calls(ctx, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> list[cst.Call]:
    from pallas_fix.analysis.context import walk

    found: list[cst.Call] = []
    for node in walk(expr):
        if _is_int32_literal(node):
            found.append(node)
        elif isinstance(node, cst.Name) and depth < 4:
            value = ctx.resolve_value(node, at)
            if value is not node:
                found.extend(_stub_calls(ctx, value, value, depth + 1))
    return found


def _stub_planner(analysis) -> dict:
    out = {}
    ctx = analysis.ctx
    for use in analysis.uses:
        if use.provenance.origin is not Origin.TRACED_CONST or use.start is None:
            continue
        if classify(use, window_of(use))[0].code != "PF104":
            continue
        calls = _stub_calls(ctx, use.start, use.subscript)
        if not calls:
            continue
        targets = {id(c) for c in calls}

        class _Unwrap(cst.CSTTransformer):
            def leave_Call(self, original_node, updated_node):
                return updated_node.args[0].value if id(original_node) in targets else updated_node

        out[(id(use.subscript), use.dim)] = FixPlan(
            codemod="test-int32-literal",
            safety=FixSafety.SAFE,
            uses=[use],
            description="replaced jnp.int32(<int>) by the int (test stand-in)",
            rewrite=lambda module, t=_Unwrap: module.visit(t()),
        )
    return out


_stub_planner.name = "test-int32-literal"
_stub_planner.codes = frozenset({"PF104"})
_STUB_REGISTERED = False


def has_planner(code: str) -> bool:
    return any(code in p.codes for p in codemods.PLANNERS if p is not _stub_planner)


def ensure_pf104_planner() -> bool:
    """Register the stand-in when no real planner fixes PF104; True when the stand-in is in use."""
    global _STUB_REGISTERED
    if has_planner("PF104"):
        return False
    if not _STUB_REGISTERED:
        codemods.PLANNERS.append(_stub_planner)
        _STUB_REGISTERED = True
    return True


# -- server commands -------------------------------------------------------------------------------
def pallas_fix_bin() -> str:
    candidate = Path(sys.executable).parent / "pallas-fix"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("pallas-fix")
    if found is None:
        pytest.fail("the pallas-fix console script is not installed (pip install -e .)")
    return found


def server_command(need_pf104_fix: bool = False) -> list[str]:
    """The real `pallas-fix lsp`, or, while PF104 has no real codemod and a test needs a PF104 fix,
    a server process with the stand-in planner registered first."""
    if need_pf104_fix and ensure_pf104_planner():
        boot = (
            f"import sys; sys.path.insert(0, {str(TESTS)!r}); import test_lsp; "
            "test_lsp.ensure_pf104_planner(); from pallas_fix.frontends.lsp.server import serve; serve()"
        )
        return [sys.executable, "-c", boot]
    return [pallas_fix_bin(), "lsp"]


# -- a client session ------------------------------------------------------------------------------
class Session:
    """One server process, initialized, with every publishDiagnostics and message recorded."""

    def __init__(self, cmd: list[str], init_options: Any = None, root: Optional[Path] = None, **caps):
        self.cmd = cmd
        self.init_options = init_options
        self.root = root
        self.caps = caps
        self.client = LanguageClient("pallas-fix-tests", "0")
        self.published: list[types.PublishDiagnosticsParams] = []
        self.messages: list[str] = []
        self.registrations: list[types.Registration] = []
        self._changed = asyncio.Event()

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _diag(params: types.PublishDiagnosticsParams) -> None:
            self.published.append(params)
            self._changed.set()

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def _show(params: types.ShowMessageParams) -> None:
            self.messages.append(params.message)
            self._changed.set()

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def _log(params: types.LogMessageParams) -> None:
            self.messages.append(params.message)

        @self.client.feature(types.CLIENT_REGISTER_CAPABILITY)
        def _register(params: types.RegistrationParams) -> None:
            self.registrations.extend(params.registrations)

    async def __aenter__(self) -> "Session":
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        await self.client.start_io(*self.cmd, env=env)
        capabilities = types.ClientCapabilities(
            workspace=types.WorkspaceClientCapabilities(
                workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=self.caps.get("document_changes", True)),
                did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
            ),
            text_document=types.TextDocumentClientCapabilities(
                hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
                publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
            ),
        )
        root_uri = from_fs_path(str(self.root)) if self.root else None
        self.init_result = await asyncio.wait_for(
            self.client.initialize_async(
                types.InitializeParams(
                    capabilities=capabilities, root_uri=root_uri, initialization_options=self.init_options
                )
            ),
            30,
        )
        self.client.initialized(types.InitializedParams())
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 10)
            self.client.exit(None)
            await asyncio.wait_for(self.client.stop(), 10)
        except Exception:
            server = self.client._server
            if server is not None and server.returncode is None:
                server.kill()
            raise

    # documents
    def open(self, path: Path, text: Optional[str] = None, version: int = 1) -> str:
        uri = from_fs_path(str(path))
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text if text is not None else path.read_text())
            )
        )
        return uri

    def change(self, uri: str, version: int, text: str) -> None:
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out; published={[(p.uri, p.version, len(p.diagnostics)) for p in self.published]} messages={self.messages}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def diagnostics(self, uri: str, version: Optional[int] = None, settled: bool = False, timeout: float = 30.0) -> list[types.Diagnostic]:
        """The latest diagnostics for `uri` (at `version`); `settled`: once every offered fix
        carries its edits."""

        def latest():
            for p in reversed(self.published):
                if p.uri != uri or (version is not None and p.version != version):
                    continue
                if settled and any(_fix(d) is not None and _fix(d).get("edits") is None for d in p.diagnostics):
                    return None
                return [list(p.diagnostics)]
            return None

        return (await self.wait_for(latest, timeout))[0]

    async def code_actions(self, uri: str, rng: types.Range, only: Optional[list[str]] = None, diagnostics=(), trigger=None):
        return await asyncio.wait_for(
            self.client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=rng,
                    context=types.CodeActionContext(diagnostics=list(diagnostics), only=only, trigger_kind=trigger),
                )
            ),
            60,
        )


def _fix(d: types.Diagnostic) -> Optional[dict]:
    return d.data.get("fix") if isinstance(d.data, dict) else None


def run(coro):
    return asyncio.run(coro)


# -- applying edits independently of the server's own helpers -------------------------------------
def apply_workspace_edit(text: str, edit: types.WorkspaceEdit, uri: str) -> str:
    """Apply the edit the way a client does, with pygls's document model (not pallas_fix.lsp_text)."""
    if edit.document_changes:
        (change,) = edit.document_changes
        assert change.text_document.uri == uri
        edits = change.edits
    else:
        edits = edit.changes[uri]
    doc = TextDocument(uri, text, sync_kind=types.TextDocumentSyncKind.Incremental)
    # Bottom-up, so earlier positions stay valid.
    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        doc.apply_change(types.TextDocumentContentChangePartial(range=e.range, text=e.new_text))
    return doc.source


def edits_of(edit: types.WorkspaceEdit) -> list[types.TextEdit]:
    return list(edit.document_changes[0].edits) if edit.document_changes else list(next(iter(edit.changes.values())))


def copy_fixture(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copyfile(FIX / name, target)
    return target


# -- tests -----------------------------------------------------------------------------------------
def test_diagnostics_on_open(tmp_path):
    path = copy_fixture(tmp_path, "two_kernels.py")
    text = path.read_text()
    expected = analyze_source(text, str(path)).findings
    assert {f.code for f in expected} >= {"PF101", "PF104"}

    async def go():
        async with Session(server_command()) as s:
            uri = s.open(path)
            return await s.diagnostics(uri, version=1, settled=True), s.init_result

    diags, init = run(go())
    assert [(d.code, d.range.start.line, d.range.start.character) for d in diags] == [
        (f.code, f.span.line - 1, f.span.column) for f in expected
    ]
    for d, f in zip(diags, expected):
        assert d.source == "pallas-fix"
        assert d.code_description.href == DOCS_URL.format(code=f.code.lower())
        assert d.severity == {"error": 1, "warning": 2, "info": 3}[f.severity]
        assert f.message in d.message
        assert (d.range.end.line, d.range.end.character) == (f.span.end_line - 1, f.span.end_column)
        fix = _fix(d)
        if f.fixable and f.fix_safety is FixSafety.SAFE:
            assert fix["codemod"] == f.fix_id and fix["safety"] == "safe" and fix["edits"]
        else:
            assert fix is None
    caps = init.capabilities
    assert caps.hover_provider
    assert set(caps.code_action_provider.code_action_kinds) >= {"quickfix", "source.fixAll.pallas-fix"}


def _single_fix_case(name: str, code: str):
    """(fixture, finding) for a fixture whose only fix is the one for `code`."""
    text = (FIX / name).read_text()
    analysis = analyze_source(text, name)
    fixable = [f for f in analysis.findings if f.fixable]
    assert len(analysis.plans) == 1, f"{name} should have exactly one fix, has {[p.codemod for p in analysis.plans]}"
    finding = next(f for f in fixable if f.code == code)
    return text, finding


def _check_quick_fix(tmp_path, name: str, code: str, stub: bool):
    path = copy_fixture(tmp_path, name)

    async def go():
        async with Session(server_command(need_pf104_fix=stub)) as s:
            uri = s.open(path)
            diags = await s.diagnostics(uri, version=1, settled=True)
            target = next(d for d in diags if d.code == code and _fix(d))
            actions = await s.code_actions(uri, target.range, only=["quickfix"], diagnostics=[target])
            return uri, target, actions

    uri, target, actions = run(go())
    text, finding = _single_fix_case(name, code)
    assert (target.range.start.line, target.range.start.character) == (finding.span.line - 1, finding.span.column)
    fixes = [a for a in actions if a.is_preferred]
    assert len(fixes) == 1, [a.title for a in actions]
    action = fixes[0]
    assert action.kind == "quickfix" and code in action.title
    assert action.diagnostics and action.diagnostics[0].code == code
    applied = apply_workspace_edit(text, action.edit, uri)
    # The quick fix is that one fix applied, and, as it is the file's only fix, what --apply writes.
    only = fix_source(text, str(FIX / name), only={(finding.span.line, finding.span.column)})
    whole = fix_source(text, str(FIX / name))
    assert only.changed and not only.error
    assert applied == only.source == whole.source
    # The edits carried in the diagnostic's data are the same edits.
    data_edits = _fix(target)["edits"]
    assert data_edits == [
        {"range": {"start": {"line": e.range.start.line, "character": e.range.start.character},
                   "end": {"line": e.range.end.line, "character": e.range.end.character}},
         "newText": e.new_text}
        for e in edits_of(action.edit)
    ]
    return action


def test_quick_fix_traced_constant_equals_apply(tmp_path):
    stub = ensure_pf104_planner()
    action = _check_quick_fix(tmp_path, "traced_constant.py", "PF104", stub=True)
    if stub:
        # The stand-in rewrites the assignment of `off` and the slice: two separate line ranges.
        assert len(edits_of(action.edit)) == 2


def test_quick_fix_loop_edits_kernel_and_call_site(tmp_path):
    if not has_planner("PF101"):
        pytest.skip("no codemod fixes PF101 in this tree (pallas_fix.codemods.lift_loop not registered)")
    action = _check_quick_fix(tmp_path, "loop_kernel.py", "PF101", stub=False)
    text = (FIX / "loop_kernel.py").read_text()
    edits = edits_of(action.edit)
    kernel_line = next(n for n, l in enumerate(text.splitlines()) if l.startswith("def tanh_kernel"))
    call_line = next(n for n, l in enumerate(text.splitlines()) if "pl.pallas_call(" in l)
    assert len(edits) >= 2
    assert any(kernel_line < e.range.start.line < call_line for e in edits)  # the kernel body
    assert any(e.range.start.line > call_line for e in edits)  # the pallas_call keywords


def test_fix_all_applies_every_safe_fix(tmp_path):
    path = copy_fixture(tmp_path, "two_kernels.py")
    text = path.read_text()

    async def go():
        async with Session(server_command(need_pf104_fix=True)) as s:
            uri = s.open(path)
            await s.diagnostics(uri, version=1)
            whole = types.Range(types.Position(0, 0), types.Position(len(text.splitlines()), 0))
            requested = await s.code_actions(uri, whole, only=["source.fixAll"])
            automatic = await s.code_actions(uri, whole, trigger=types.CodeActionTriggerKind.Automatic)
            return uri, requested, automatic

    uri, requested, automatic = run(go())
    (action,) = requested
    assert action.kind == "source.fixAll.pallas-fix"
    expected = fix_source(text, str(path), unsafe=False)
    assert expected.changed and len(expected.applied) >= 2  # both kernels are fixed
    assert apply_workspace_edit(text, action.edit, uri) == expected.source
    # Cursor-move requests get the per-finding actions but not the (costly) whole-file fix.
    assert automatic and all(a.kind == "quickfix" for a in automatic)


def test_ignore_action_silences_the_finding(tmp_path):
    path = copy_fixture(tmp_path, "two_kernels.py")
    text = path.read_text()

    async def go():
        async with Session(server_command()) as s:
            uri = s.open(path)
            diags = await s.diagnostics(uri, version=1)
            target = next(d for d in diags if d.code == "PF104")
            actions = await s.code_actions(uri, target.range, only=["quickfix"])
            ignore = next(a for a in actions if a.title.startswith("Ignore PF104"))
            new_text = apply_workspace_edit(text, ignore.edit, uri)
            s.change(uri, 2, new_text)
            after = await s.diagnostics(uri, version=2)
            return diags, new_text, after

    diags, new_text, after = run(go())
    line = next(l for l in new_text.splitlines() if "jnp.int32(3)" in l)
    assert line.endswith("  # pallas-fix: ignore[PF104]")
    assert [d.code for d in after] == [d.code for d in diags if d.code != "PF104"]


def test_hover_shows_the_rule_doc(tmp_path):
    path = copy_fixture(tmp_path, "two_kernels.py")

    async def go():
        async with Session(server_command()) as s:
            uri = s.open(path)
            diags = await s.diagnostics(uri, version=1)
            target = next(d for d in diags if d.code == "PF104")
            inside = types.Position(target.range.start.line, target.range.start.character + 3)
            on = await s.client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri), inside))
            off = await s.client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(0, 0)))
            return on, off

    on, off = run(go())
    assert off is None
    assert on.contents.kind == "markdown"
    doc = describe("PF104")
    assert doc.strip() in on.contents.value
    assert DOCS_URL.format(code="pf104") in on.contents.value


def test_a_fix_that_waits_for_another_is_offered_and_says_so(tmp_path):
    # The inner of two nested loops, and an output's second program-id window, are fixed by
    # --apply once the outer loop (the first window) is: the editor said "no fix" for them.
    nested = TESTS / "fixtures" / "codemods" / "lift_loop" / "nested_loops_before.py"
    path = tmp_path / "nested.py"
    shutil.copyfile(nested, path)

    async def go():
        async with Session(server_command()) as s:
            uri = s.open(path)
            return await s.diagnostics(uri, version=1, settled=True)

    diags = run(go())
    assert len(diags) == 6
    waiting = [d for d in diags if "fixed after another fix: lifted the loop over `i`" in d.message]
    assert len(waiting) == 3 and all("j * TN" in d.message for d in waiting)
    for d in diags:
        assert "no fix" not in d.message and "refusal" not in d.data
        fix = _fix(d)
        assert fix is not None and fix["codemod"] == "lift-loop" and fix["edits"]


def test_syntax_error_gets_a_diagnostic_and_the_server_recovers(tmp_path):
    path = copy_fixture(tmp_path, "syntax_error.py")
    text = path.read_text()
    with pytest.raises(SourceError) as info:
        analyze_source(text, str(path))
    err = info.value
    fixed = text.replace("x.dtype)(x)", "x.dtype))(x)")
    assert analyze_source(fixed, str(path)).findings == []

    async def go():
        async with Session(server_command()) as s:
            uri = s.open(path)
            broken = await s.diagnostics(uri, version=1)
            everything = types.Range(types.Position(0, 0), types.Position(99, 0))
            actions = await s.code_actions(uri, everything)
            hover = await s.client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(err.line - 1, 0)))
            s.change(uri, 2, fixed)
            healed = await s.diagnostics(uri, version=2)
            return broken, actions, hover, healed

    broken, actions, hover, healed = run(go())
    (d,) = broken
    assert d.severity == types.DiagnosticSeverity.Error
    assert (d.range.start.line, d.range.start.character) == (err.line - 1, err.column)
    assert (d.range.start.line, d.range.start.character) == python_place(text)
    assert err.reason in d.message
    assert not actions and hover is None
    assert healed == []


def python_place(text: str) -> tuple[int, int]:
    """Where `compile` puts the syntax error of `text`, 0-based as LSP positions are."""
    with pytest.raises(SyntaxError) as info:
        compile(text, "<text>", "exec")
    return info.value.lineno - 1, info.value.offset - 1


def test_an_edit_that_breaks_the_file_is_flagged_where_python_flags_it(tmp_path):
    # Typed into an open file (the incremental path): LibCST placed this error a line and more
    # later than Python does.
    path = copy_fixture(tmp_path, "syntax_error.py")
    good = path.read_text().replace("x.dtype)(x)", "x.dtype))(x)")
    path.write_text(good)
    broken = good.replace("def after_the_error(x):\n    return x + 1", "def after_the_error(x):\n    return [x +\n\n\n")

    async def go():
        async with Session(server_command()) as s:
            uri = s.open(path)
            first = await s.diagnostics(uri, version=1)
            s.change(uri, 2, broken)
            return first, await s.diagnostics(uri, version=2)

    first, after = run(go())
    assert first == []
    (d,) = after
    assert d.data["syntaxError"] is True
    assert (d.range.start.line, d.range.start.character) == python_place(broken)


class RawConnection:
    """JSON-RPC frames written and read by hand, for input no well-behaved client would send."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.responses: dict[Any, dict] = {}
        self.notifications: list[dict] = []

    def send_bytes(self, body: bytes) -> None:
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def send(self, message: dict) -> None:
        self.send_bytes(json.dumps({"jsonrpc": "2.0", **message}).encode())

    async def _read_one(self) -> dict:
        length = None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                raise EOFError("server closed its output")
            line = line.strip()
            if not line:
                break
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return json.loads(await self.proc.stdout.readexactly(length))

    async def response(self, msg_id, timeout: float = 30.0) -> dict:
        async def pump():
            while msg_id not in self.responses:
                msg = await self._read_one()
                if "id" in msg and "method" not in msg:
                    self.responses[msg["id"]] = msg
                else:
                    self.notifications.append(msg)
            return self.responses.pop(msg_id)

        return await asyncio.wait_for(pump(), timeout)

    async def request(self, msg_id, method: str, params: Any) -> dict:
        self.send({"id": msg_id, "method": method, "params": params})
        return await self.response(msg_id)


def test_malformed_input_does_not_kill_the_server(tmp_path):
    path = copy_fixture(tmp_path, "two_kernels.py")
    uri = from_fs_path(str(path))
    text = path.read_text()

    async def go():
        cmd = server_command()
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
        conn = RawConnection(proc)
        try:
            await conn.request(1, "initialize", {"processId": None, "rootUri": None, "capabilities": {}})
            conn.send({"method": "initialized", "params": {}})
            conn.send({"method": "textDocument/didOpen", "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}})
            bad = {}
            for n, (method, params) in enumerate([
                ("textDocument/codeAction", {"textDocument": 5}),
                ("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": "x"}}),
                ("textDocument/codeAction", None),
                ("textDocument/hover", [1, 2, 3]),
                ("pallas-fix/noSuchMethod", {}),
            ], start=10):
                bad[method + str(n)] = await conn.request(n, method, params)
            # Notifications with nonsense, and frames that are not JSON-RPC at all.
            conn.send({"method": "textDocument/didChange", "params": {"textDocument": {"uri": uri}, "contentChanges": "zz"}})
            conn.send({"method": "textDocument/didOpen", "params": {"textDocument": {"uri": 17}}})
            conn.send_bytes(b"{not json!!}")
            conn.send_bytes(b"[]")
            whole = {"start": {"line": 0, "character": 0}, "end": {"line": 200, "character": 0}}
            unknown = await conn.request(30, "textDocument/codeAction", {"textDocument": {"uri": "file:///nowhere/x.py"}, "range": whole, "context": {"diagnostics": []}})
            far = await conn.request(31, "textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 10000, "character": 10000}})
            # Still answering, about the document as it was opened.
            actions = await conn.request(32, "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": whole, "context": {"diagnostics": [], "only": ["quickfix"]}})
            await conn.request(33, "shutdown", None)
            conn.send({"method": "exit"})
            code = await asyncio.wait_for(proc.wait(), 20)
            return bad, unknown, far, actions, code, conn.notifications
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    bad, unknown, far, actions, code, notes = run(go())
    for name, reply in bad.items():
        assert "error" in reply and "result" not in reply, (name, reply)
    assert unknown["result"] is None and far["result"] is None
    assert any(a["title"].startswith("Ignore PF104") for a in actions["result"])
    published = [n for n in notes if n.get("method") == "textDocument/publishDiagnostics"]
    assert published and {d["code"] for d in published[-1]["params"]["diagnostics"]} >= {"PF101", "PF104"}
    assert code == 0


def test_stale_changes_are_not_reported(tmp_path):
    path = copy_fixture(tmp_path, "two_kernels.py")
    text = path.read_text()
    # Each intermediate version removes one more kernel line; only the last one counts.
    pick = text.split("def tanh_kernel")[0]

    async def go():
        async with Session(server_command(), init_options={"debounceMs": 300}) as s:
            uri = s.open(path)
            await s.diagnostics(uri, version=1)
            for v in range(2, 8):
                s.change(uri, v, pick + f"\n# edit {v}\n")
            final = await s.diagnostics(uri, version=7)
            await asyncio.sleep(0.8)  # anything still queued would land here
            return [p.version for p in s.published if p.uri == uri], final

    versions, final = run(go())
    assert versions[-1] == 7
    assert set(versions) <= {1, 7}, versions
    assert [d.code for d in final] == ["PF104"]


def _codes_now(s: Session, uri: str) -> set:
    mine = [p for p in s.published if p.uri == uri]
    return {d.code for d in mine[-1].diagnostics} if mine else set()


def test_config_from_pyproject_and_reload(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.pallas-fix]\nignore = ["PF104"]\n')
    path = copy_fixture(tmp_path, "two_kernels.py")

    async def go():
        async with Session(server_command(), root=tmp_path) as s:
            uri = s.open(path)
            first = await s.diagnostics(uri, version=1)
            # The watched-files registration the server asked for.
            await s.wait_for(lambda: s.registrations)
            pyproject.write_text('[tool.pallas-fix]\nselect = ["PF104"]\n')
            s.client.workspace_did_change_watched_files(
                types.DidChangeWatchedFilesParams([types.FileEvent(from_fs_path(str(pyproject)), types.FileChangeType.Changed)])
            )
            second = await s.wait_for(lambda: _codes_now(s, uri) == {"PF104"} and s.published[-1].diagnostics)
            # Without a watcher event: the next save picks the change up by mtime.
            pyproject.write_text('[tool.pallas-fix]\nselect = ["PF101"]\n    \n')
            s.client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri)))
            third = await s.wait_for(lambda: _codes_now(s, uri) == {"PF101"} and s.published[-1].diagnostics)
            # A broken pyproject: defaults, and the user is told.
            pyproject.write_text("[tool.pallas-fix\n")
            s.client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri)))
            fourth = await s.wait_for(lambda: _codes_now(s, uri) == {"PF101", "PF104"} and s.published[-1].diagnostics)
            return first, second, third, fourth, s.registrations, s.messages

    first, second, third, fourth, registrations, messages = run(go())
    assert "PF104" not in {d.code for d in first} and "PF101" in {d.code for d in first}
    assert {d.code for d in second} == {"PF104"}
    assert {d.code for d in third} == {"PF101"}
    assert {d.code for d in fourth} == {"PF101", "PF104"}
    assert any("pyproject.toml" in m for m in messages)
    (reg,) = registrations
    assert reg.method == "workspace/didChangeWatchedFiles"


def test_initialization_options(tmp_path):
    path = copy_fixture(tmp_path, "two_kernels.py")

    async def go(options):
        async with Session(server_command(), init_options=options, document_changes=False) as s:
            uri = s.open(path)
            diags = await s.diagnostics(uri, version=1)
            actions = await s.code_actions(uri, diags[0].range, only=["quickfix"])
            return diags, actions, s.messages

    diags, actions, _ = run(go({"ignore": ["PF101"]}))
    assert {d.code for d in diags} == {"PF104"}
    # A client without documentChanges support gets plain `changes`.
    assert actions and all(a.edit.changes and not a.edit.document_changes for a in actions)
    diags, _, messages = run(go({"select": ["PF101"], "backend": "cuda"}))
    assert {d.code for d in diags} == {"PF101"}
    assert any("cuda" in m for m in messages)


def test_server_never_runs_user_code(tmp_path):
    marker = tmp_path / "executed"
    source = (FIX / "two_kernels.py").read_text() + (
        f"\nopen({str(marker)!r}, 'w').write('ran')\n"
        f"import definitely_not_a_module_{os.getpid()}\n"
    )
    path = tmp_path / "side_effects.py"
    path.write_text(source)

    async def go():
        async with Session(server_command(need_pf104_fix=True)) as s:
            uri = s.open(path)
            diags = await s.diagnostics(uri, version=1, settled=True)
            whole = types.Range(types.Position(0, 0), types.Position(200, 0))
            actions = await s.code_actions(uri, whole, trigger=types.CodeActionTriggerKind.Invoked)
            return diags, actions

    diags, actions = run(go())
    assert {d.code for d in diags} >= {"PF101", "PF104"}
    assert any(a.kind == "source.fixAll.pallas-fix" for a in actions)
    assert not marker.exists()


def test_unsafe_fixes_only_when_enabled_and_never_preferred(tmp_path):
    path = copy_fixture(tmp_path, "reduction.py")
    text = path.read_text()
    analysis = analyze_source(text, str(path))
    unsafe = [f for f in analysis.findings if f.fixable and f.fix_safety is FixSafety.UNSAFE]
    if not unsafe:
        pytest.skip("no codemod offers an unsafe fix for reduction.py in this tree")
    target_finding = unsafe[0]

    async def go(options):
        async with Session(server_command(), init_options=options) as s:
            uri = s.open(path)
            diags = await s.diagnostics(uri, version=1, settled=True)
            target = next(d for d in diags if d.range.start.line == target_finding.span.line - 1)
            quick = await s.code_actions(uri, target.range, only=["quickfix"])
            whole = types.Range(types.Position(0, 0), types.Position(len(text.splitlines()), 0))
            fix_all = await s.code_actions(uri, whole, only=["source.fixAll"])
            return uri, target, quick, fix_all

    uri, target, quick, fix_all = run(go(None))
    assert _fix(target) is None and "unsafeFix" in target.data
    assert [a.title for a in quick if not a.title.startswith("Ignore")] == []
    assert not fix_all  # fix-all applies safe fixes only

    uri, target, quick, fix_all = run(go({"unsafeFixes": True}))
    assert _fix(target)["safety"] == "unsafe"
    (fix,) = [a for a in quick if not a.title.startswith("Ignore")]
    assert "(unsafe)" in fix.title and not fix.is_preferred
    key = (target_finding.span.line, target_finding.span.column)
    expected = fix_source(text, str(path), unsafe=True, only={key})
    assert expected.changed and apply_workspace_edit(text, fix.edit, uri) == expected.source
    assert not fix_all
