"""Results records, tables and figures shared by every command."""

from .results import Record, format_table, load_results, summarize, write_results

__all__ = ["Record", "format_table", "load_results", "summarize", "write_results"]
