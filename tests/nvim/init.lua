-- Headless Neovim session for the pallas-fix end-to-end test (tests/test_lsp_nvim.py).
--
-- Started as `nvim --headless --clean -u tests/nvim/init.lua`, it opens PALLAS_FIX_NVIM_FILE,
-- attaches `pallas-fix lsp`, waits for diagnostics, applies one code action through Neovim's own
-- LSP client (vim.lsp.util.apply_workspace_edit), writes the buffer and quits. What happened is
-- written as JSON to PALLAS_FIX_NVIM_REPORT. Works on Neovim 0.7 (Debian 12's) and later: it uses
-- vim.lsp.start only where it exists, and requests and applies the code action itself rather than
-- through vim.lsp.buf.code_action{apply=...} (0.8+).
--
-- Environment:
--   PALLAS_FIX_BIN          the pallas-fix console script (the venv's)
--   PALLAS_FIX_LSP_CMD      optional JSON list: the whole server command, replacing BIN + "lsp"
--   PALLAS_FIX_NVIM_FILE    the file to open (a copy: it is overwritten)
--   PALLAS_FIX_NVIM_CODE    the rule code whose quick fix to apply ("fixall": the fix-all action)
--   PALLAS_FIX_NVIM_REPORT  where to write the JSON report
--   PALLAS_FIX_NVIM_TIMEOUT_MS  overall limit (default 60000)

local report = { steps = {} }
local report_path = os.getenv("PALLAS_FIX_NVIM_REPORT")
local timeout_ms = tonumber(os.getenv("PALLAS_FIX_NVIM_TIMEOUT_MS") or "60000")

local function step(msg)
  table.insert(report.steps, msg)
end

local function finish(status, detail)
  report.status = status
  report.detail = detail
  local v = vim.version()
  report.nvim = string.format("%d.%d.%d", v.major, v.minor, v.patch)
  if report_path then
    vim.fn.writefile({ vim.fn.json_encode(report) }, report_path)
  end
  vim.cmd(status == "ok" and "qall!" or "cquit! 3")
end

local function server_cmd()
  local raw = os.getenv("PALLAS_FIX_LSP_CMD")
  if raw and raw ~= "" then
    return vim.fn.json_decode(raw)
  end
  return { os.getenv("PALLAS_FIX_BIN") or "pallas-fix", "lsp" }
end

local last_published = nil

local function start_client(bufnr, root)
  local config = {
    name = "pallas-fix",
    cmd = server_cmd(),
    root_dir = root,
    handlers = {
      -- Keep the raw diagnostics (with their `data`) as well as letting Neovim show them.
      ["textDocument/publishDiagnostics"] = function(err, result, ctx, cfg)
        if result and result.uri == vim.uri_from_bufnr(bufnr) then
          last_published = result
        end
        return vim.lsp.diagnostic.on_publish_diagnostics(err, result, ctx, cfg)
      end,
    },
    on_exit = function(code, signal)
      if code ~= 0 and report.status == nil then
        step(string.format("server exited with code %s signal %s", tostring(code), tostring(signal)))
      end
    end,
  }
  local id
  if vim.lsp.start then
    -- 0.8+: starts the client and attaches it to the current buffer (start_client is deprecated
    -- from 0.11 on).
    id = vim.lsp.start(config)
  else
    id = vim.lsp.start_client(config)
    if id then
      vim.lsp.buf_attach_client(bufnr, id)
    end
  end
  if not id then
    error("could not start the language server " .. vim.inspect(config.cmd))
  end
  return id
end

local function wait(ms, pred, what)
  local ok = vim.wait(ms, pred, 50)
  if not ok then
    error("timed out waiting for " .. what)
  end
end

local function run()
  local file = assert(os.getenv("PALLAS_FIX_NVIM_FILE"), "PALLAS_FIX_NVIM_FILE is not set")
  local code = os.getenv("PALLAS_FIX_NVIM_CODE") or "fixall"
  vim.cmd("edit " .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  local client_id = start_client(bufnr, vim.fn.fnamemodify(file, ":p:h"))
  step("client started")

  -- Diagnostics, with the fix edits carried in data once the server has computed them.
  wait(timeout_ms / 2, function()
    if last_published == nil then
      return false
    end
    for _, d in ipairs(last_published.diagnostics) do
      if d.data and d.data.fix and d.data.fix ~= vim.NIL and d.data.fix.edits ~= vim.NIL and d.data.fix.edits then
        return true
      end
    end
    return false
  end, "diagnostics with a fix")
  report.diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(report.diagnostics, { code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code), lnum = d.lnum, col = d.col })
  end
  step(string.format("%d diagnostics shown", #report.diagnostics))

  local client = vim.lsp.get_client_by_id(client_id)
  local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr) } }
  local predicate
  if code == "fixall" then
    local last = vim.api.nvim_buf_line_count(bufnr)
    params.range = { start = { line = 0, character = 0 }, ["end"] = { line = last, character = 0 } }
    params.context = { diagnostics = {}, only = { "source.fixAll" } }
    predicate = function(a)
      return a.kind == "source.fixAll.pallas-fix"
    end
  else
    local target = nil
    for _, d in ipairs(last_published.diagnostics) do
      if d.code == code and d.data and d.data.fix and d.data.fix ~= vim.NIL then
        target = d
        break
      end
    end
    if not target then
      error("no fixable " .. code .. " diagnostic")
    end
    -- Put the cursor on the finding, as a user would, and ask for that range.
    vim.api.nvim_win_set_cursor(0, { target.range.start.line + 1, 0 })
    params.range = target.range
    params.context = { diagnostics = { target }, only = { "quickfix" } }
    predicate = function(a)
      return a.kind == "quickfix" and a.isPreferred == true
    end
  end

  local responses = vim.lsp.buf_request_sync(bufnr, "textDocument/codeAction", params, timeout_ms / 2)
  if not responses then
    error("no reply to textDocument/codeAction")
  end
  local chosen = nil
  report.actions = {}
  for _, resp in pairs(responses) do
    if resp.err then
      error("codeAction error: " .. vim.inspect(resp.err))
    end
    for _, action in ipairs(resp.result or {}) do
      table.insert(report.actions, action.title)
      if chosen == nil and predicate(action) then
        chosen = action
      end
    end
  end
  if not chosen then
    error("no matching code action among " .. vim.inspect(report.actions))
  end
  report.applied = chosen.title
  vim.lsp.util.apply_workspace_edit(chosen.edit, client.offset_encoding or "utf-16")
  step("applied " .. chosen.title)
  vim.cmd("write")
  step("written")
  finish("ok")
end

vim.api.nvim_create_autocmd("VimEnter", {
  once = true,
  callback = function()
    vim.defer_fn(function()
      if report.status == nil then
        finish("error", "overall timeout after " .. timeout_ms .. " ms")
      end
    end, timeout_ms)
    local ok, err = pcall(run)
    if not ok then
      finish("error", tostring(err))
    end
  end,
})
