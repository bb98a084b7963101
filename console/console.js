// The console's only script (served from /console/assets, allowed by the Content-Security-Policy): dates in the
// operator's time zone, and a confirmation before destructive forms. Everything works without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var date = new Date(el.getAttribute("datetime"));
    if (!isNaN(date.getTime())) { el.textContent = date.toLocaleString(); el.title = el.getAttribute("datetime"); }
  });
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });
});
