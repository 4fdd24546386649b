"""Small widgets, one job each: header line, GPU pane, layout picker, launch log, bench pane, prompt bar."""
