package record

import ()
