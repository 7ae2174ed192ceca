"""Learning to schedule from outcomes (issue 23): the simulator as a Gymnasium environment.

* :mod:`.gym_env`: :class:`~.gym_env.EdgeplaneSchedEnv`, one step per replica the scheduler
  places, with ``action_masks()`` for maskable policies (sb3-contrib's ``MaskablePPO``);
* :mod:`.observe`: the observation, built only from what the live scheduler holds (its node
  table, the request, the profile's reward terms and scores) with the agents' feature code;
* :mod:`.reward`: the return, measured outcomes over the episode with one set of weights.

Nothing here reads the simulator's hidden physics; ``tests/unit/sim/test_hidden_physics.py``
scans this package (gymnasium comes with the ``[train]`` and ``[test]`` extras).
"""
