"""Generated incidents: the incident generator, the journal writer that turns entries into
real .journal files (systemd-journal-remote) and their renderings, and `forensics demo`."""
