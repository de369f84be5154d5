"""Playback: pictures, recordings and replays of any backend.

* :mod:`simbackend.playback.render`: MuJoCo's offscreen renderer drawing the
  compiled model (which every backend shares) at any backend's state: images,
  camera observations (rgb, depth, segmentation, point clouds), tiled views.
* :mod:`simbackend.playback.video`: mp4 and PNG output.
* :mod:`simbackend.playback.recording`: a streaming, versioned HDF5 format of
  rollouts, the recorder that writes it and the reader.
* :mod:`simbackend.playback.replay`: kinematic and dynamic replay into any
  backend built from the same model.

Nothing here imports an engine to simulate; the renderer uses MuJoCo's
renderer only, on the compiled model (``docs/architecture.md``, "The dependency rule").
"""
