"""Files for the front ends: which files a run looks at (.gitignore), reading sources without
loss, writing rewrites back safely, the one file-error type, and Jupyter notebooks.

May import core, rules and the frontends root modules (report, lines)."""
