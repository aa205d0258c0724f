"""The `report` stage: every comparison of the paper as Markdown and one standalone HTML page."""
