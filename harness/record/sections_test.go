package record

import ()

func i(v int) *int { return &v }
