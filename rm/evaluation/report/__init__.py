"""The eval report's words, tables and figures: report.md, report.html and their PNGs (rm eval, rm redteam)."""
