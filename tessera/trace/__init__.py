"""Proxies that build tile IR while a kernel body runs once per specialization."""
