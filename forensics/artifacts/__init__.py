"""The incident leaving the tool: a Perfetto trace (`forensics trace`) and an evidence
bundle for a bug report (`forensics bundle`)."""
