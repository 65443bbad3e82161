"""Integrations with training frameworks (imported only when used)."""
