"""INT8 calibration: ranges of the tensors the int8 export quantizes, measured with native MXNet on the user's data.

* :mod:`.collectors` - minmax, percentile and entropy (KL) range collectors.
* :mod:`.calibrate` - :func:`calibrate`, which writes the calibration table
  (:class:`mx_trt.export.calibration.CalibrationTable`) that int8 binds read.
"""
from mx_trt.quantize.calibrate import calibrate

__all__ = ["calibrate"]
