"""The pure core: parsing, models, planning, predicting, fitting. No files, processes, network or screen."""
