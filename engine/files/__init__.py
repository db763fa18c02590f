"""Files a user gives and gets: audio in and out, checked and streamed (`audio`), outputs
written all or nothing (`outputs`), the bundled files and the official file names (`paths`),
and non-finite samples made finite where PCM enters (`finite`)."""
