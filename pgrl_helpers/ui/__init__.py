"""The notebooks' widgets (pip extra ``widgets``: ipywidgets, matplotlib).

* ``dashboard``: the training dashboard (``make_dashboard``), presets, ``plot_histories``
* ``gae_widget``: notebook 10's gamma / lambda sliders on a short PPO run
* ``clip_widget``: notebook 11's clip-family widget

Importing ``pgrl_helpers.ui`` loads nothing; ``pgrl_helpers.ui.dashboard`` loads ipywidgets and
matplotlib.
"""
