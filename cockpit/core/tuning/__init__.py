"""cockpit.core.tuning: find the best layout and knobs for a goal under latency bounds, measured on the box.

Pure, like the planner it builds on: ``spec`` parses what was asked, ``candidates`` plans and
predicts every layout x knob combination, ``margin`` measures how far the model may be off on an
untried candidate (out of sample), ``search`` decides what to launch next, which level to measure
and when to stop, ``events`` are what a tune tells its faces. ``cockpit.lab.tune_loop`` runs the
loop on a lab (launch, levels, journal, learn); `cockpit tune` and the screen's `tune` drive it.
"""
