"""The notebooks' widgets (pip extra ``widgets``: ipywidgets, matplotlib).

* ``dashboard``: the training dashboard (``make_dashboard``), presets, the runs table
* ``figures``: ``plot_histories`` (the dashboard's curves) and a figure as a widget's PNG
* ``gae_widget``: notebook 10's gamma / lambda sliders on a short PPO run
* ``clip_widget``: notebook 11's clip-family widget

Importing ``pgrl_helpers.ui`` loads nothing; ``pgrl_helpers.ui.dashboard`` loads ipywidgets and
matplotlib (``ui.figures`` matplotlib only).
"""
